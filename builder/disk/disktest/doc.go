// Package disktest is what tests of node disks share: running a
// package's tests in a private mount namespace, and the tools writing and
// mounting disks needs.
package disktest
