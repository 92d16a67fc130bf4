// Package ctxiotest interrupts an operation at each of its steps in turn,
// for tests that prove a command stops cleanly on SIGINT or SIGTERM
// wherever the signal arrives.
package ctxiotest
