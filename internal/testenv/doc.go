// Package testenv is what strata's tests share about where they run: the
// private mount namespace a package's tests run in, the external tools
// they need, and throwaway signing keys. Only tests import it.
package testenv
