package node_test

// The engine opens nodes through the backends registered with package
// nodestate; a program registers them by importing package backends.
import _ "github.com/strata-dev/strata/internal/nodestate/backends"
