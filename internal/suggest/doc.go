// Package suggest finds the names closest to a mistyped one, for the "did
// you mean" of error messages.
package suggest
