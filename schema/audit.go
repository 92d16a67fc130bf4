package schema

import (
	"fmt"

	"github.com/strata-dev/strata/manifests"
)

// Finding is one result of an audit.
type Finding struct {
	// Severity is "problem" (the audit fails) or "warning".
	Severity string `json:"severity"`
	// Kind is a stable keyword: chain, gap, unknown, tampered, drift,
	// unreadable, behind, pending-restart, signature, constraint.
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Path    string `json:"path,omitempty"`
}

// Audit is the result of verify-sequence.
type Audit struct {
	Root string `json:"root,omitempty"`
	Repo string `json:"repo,omitempty"`
	Line string `json:"line,omitempty"`
	// Head is the node's head; RepoHead the line's head in the repository.
	Head     *manifests.Ref `json:"head,omitempty"`
	RepoHead *manifests.Ref `json:"repo_head,omitempty"`
	// Behind counts the repository's overlays the node has not applied.
	Behind       int                       `json:"behind"`
	Applied      []string                  `json:"applied,omitempty"`
	Pending      []manifests.ServiceAction `json:"pending_restarts"`
	TreeDigest   string                    `json:"tree_digest,omitempty"`
	FilesChecked bool                      `json:"files_checked"`
	Findings     []Finding                 `json:"findings"`
}

// OK reports whether the audit found no problem.
func (a *Audit) OK() bool {
	for _, f := range a.Findings {
		if f.Severity == "problem" {
			return false
		}
	}
	return true
}

// Problem adds a finding that fails the audit.
func (a *Audit) Problem(kind, path, format string, args ...any) {
	a.Findings = append(a.Findings, Finding{Severity: "problem", Kind: kind, Path: path, Message: fmt.Sprintf(format, args...)})
}

// Warn adds a finding that does not fail the audit.
func (a *Audit) Warn(kind, format string, args ...any) {
	a.Findings = append(a.Findings, Finding{Severity: "warning", Kind: kind, Message: fmt.Sprintf(format, args...)})
}
