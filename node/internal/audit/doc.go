// Package audit holds the node engine's audits (node.Node.Verify): the
// signatures of the manifests a node's tree comes from against an
// auditor's keys, its sequence against a repository's signed index, and
// every file of its tree against the expected one. Each adds what it
// finds to a schema.Audit; nothing here changes the node.
package audit
