// Package archivetest reads and writes overlay archives member by member
// for tests that craft hostile ones: a valid overlay taken apart, one
// thing changed, put back together, or an archive made from scratch.
// Only tests import it.
package archivetest
