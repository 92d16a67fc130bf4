// Package registrytest starts a real OCI registry (Debian's
// docker-registry, the CNCF distribution) on loopback for tests.
package registrytest
