package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Finding is one result of an audit.
type Finding struct {
	// Severity is "problem" (the audit fails) or "warning".
	Severity string `json:"severity"`
	// Kind is a stable keyword: chain, gap, unknown, tampered, drift,
	// behind, pending-restart, signature, constraint.
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

func (a *Audit) problem(kind, path, format string, args ...any) {
	a.Findings = append(a.Findings, Finding{Severity: "problem", Kind: kind, Path: path, Message: fmt.Sprintf(format, args...)})
}

func (a *Audit) warn(kind, format string, args ...any) {
	a.Findings = append(a.Findings, Finding{Severity: "warning", Kind: kind, Message: fmt.Sprintf(format, args...)})
}

// VerifyNode audits the node at root: its ledger's hash chain, the stored
// manifests of the overlays in effect and their parent links, against the
// repository's signed index when repoDir is set, and with files set, every
// file of the tree against the expected state. It changes nothing. The
// error is for audits that could not run; what they found is in Audit.
func VerifyNode(root, repoDir string, files bool) (*Audit, error) {
	return VerifyNodeWith(root, repoDir, files, nil)
}

// VerifyNodeWith is VerifyNode with the auditor's own trust: when trust is
// set, the signatures of the image manifest and of every overlay manifest
// in effect (kept on the node since provisioning and apply) must verify
// against it, and the repository index is checked against it instead of
// the keys the node carries, which root on the node could replace.
func VerifyNodeWith(root, repoDir string, files bool, trust *sign.KeySet) (*Audit, error) {
	n := node.Node{Root: root}
	a := &Audit{Root: root, Repo: repoDir, Findings: []Finding{}}
	if t, err := loadTxn(n); err != nil {
		a.problem("chain", "", "unreadable transaction journal: %v", err)
	} else if t != nil {
		a.problem("chain", "", "an interrupted transaction is pending at %s; run apply-overlay or rollback to finish it", t.dir)
	}
	v, err := loadView(n)
	if err != nil {
		a.problem("chain", "", "%v", err)
		return a, nil
	}
	head := v.head()
	a.Head, a.Line = &head, v.ledger.Entries[0].Line
	a.Pending = v.ledger.PendingRestarts()
	a.TreeDigest = v.ledger.Last().TreeDigest
	for _, p := range a.Pending {
		a.warn("pending-restart", "%s of %s is pending (because of %s)", p.Action, p.Unit, strings.Join(p.Because, ", "))
	}
	prev := v.ledger.Entries[0].Head
	for i, e := range v.applied {
		a.Applied = append(a.Applied, e.Version)
		m := v.overlays[i]
		if m.Parent != prev {
			a.problem("gap", "", "overlay %s names parent %s but follows %s in the ledger", e.Version, m.Parent.Version, prev.Version)
		}
		prev = e.Head
	}
	if trust != nil {
		auditSignatures(a, v, trust)
	}
	if repoDir != "" {
		if err := auditAgainstRepo(a, v, repoDir, trust); err != nil {
			return nil, err
		}
	}
	if files {
		if err := auditFiles(a, v); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// auditSignatures checks the manifests the node's expected tree comes
// from against the auditor's keys.
func auditSignatures(a *Audit, v *nodeView, trust *sign.KeySet) {
	sig, err := os.ReadFile(v.n.Path(manifests.ImageSigPath))
	if err == nil {
		_, err = trust.Verify(v.image.Raw, sig)
	}
	if err != nil {
		a.problem("signature", "", "image manifest %s: %v", v.image.Manifest.Version, err)
	}
	for _, e := range v.applied {
		sig, err := os.ReadFile(filepath.Join(manifestStore(v.n), e.Version+".json.minisig"))
		if err == nil {
			var raw []byte
			if raw, err = os.ReadFile(filepath.Join(manifestStore(v.n), e.Version+".json")); err == nil {
				_, err = trust.Verify(raw, sig)
			}
		}
		if err != nil {
			a.problem("signature", "", "overlay manifest %s: %v", e.Version, err)
		}
	}
}

func auditAgainstRepo(a *Audit, v *nodeView, repoDir string, trust *sign.KeySet) error {
	if trust == nil {
		var err error
		if trust, err = v.n.TrustedKeys(); err != nil {
			return err
		}
	}
	r, err := repo.Open(repoDir, trust)
	if err != nil {
		a.problem("signature", "", "%v", err)
		return nil
	}
	l, err := r.Index.Find(a.Line)
	if err != nil {
		a.problem("unknown", "", "%v", err)
		return nil
	}
	rh := l.Head()
	a.RepoHead = &rh
	im := v.image.Manifest
	switch {
	case im.Base == nil && v.image.Digest != l.Image.Digest:
		a.problem("unknown", "", "the node's image %s (%s) is not line %s's image %s (%s)", im.Version, v.image.Digest, l.Name, l.Image.Version, l.Image.Digest)
	case im.Base != nil && im.Base.Digest != l.Image.Digest:
		a.problem("unknown", "", "the node's regenerated image was built from %s (%s), not line %s's image %s (%s)", im.Base.Version, im.Base.Digest, l.Name, l.Image.Version, l.Image.Digest)
	}
	// The node's sequence must be the index's, from where the node joined.
	pos := -1
	start := v.ledger.Entries[0].Head
	if start.Digest == l.Image.Digest {
		pos = 0
	}
	for i, o := range l.Overlays {
		if o.Digest == start.Digest {
			pos = i + 1
		}
	}
	if pos < 0 {
		a.problem("unknown", "", "the node's starting point %s (%s) is not in line %s", start.Version, start.Digest, l.Name)
		return nil
	}
	for _, e := range v.applied {
		if pos >= len(l.Overlays) {
			a.problem("unknown", "", "overlay %s (%s) is not in the repository's index", e.Version, e.Digest)
			return nil
		}
		want := l.Overlays[pos]
		switch {
		case want.Version == e.Version && want.Digest != e.Digest:
			a.problem("tampered", "", "overlay %s has digest %s on the node, %s in the index", e.Version, e.Digest, want.Digest)
		case want.Version != e.Version:
			found := false
			for _, o := range l.Overlays {
				if o.Version == e.Version {
					found = true
				}
			}
			if found {
				a.problem("gap", "", "node applied %s where the index has %s next", e.Version, want.Version)
			} else {
				a.problem("unknown", "", "overlay %s (%s) is not in the repository's index", e.Version, e.Digest)
			}
			return nil
		}
		pos++
	}
	a.Behind = len(l.Overlays) - pos
	if a.Behind > 0 {
		var missing []string
		for _, o := range l.Overlays[pos:] {
			missing = append(missing, o.Version)
		}
		a.warn("behind", "node is %d overlay(s) behind the head %s: %s", a.Behind, rh.Version, strings.Join(missing, ", "))
	}
	return nil
}

func auditFiles(a *Audit, v *nodeView) error {
	a.FilesChecked = true
	want, err := v.expected()
	if err != nil {
		a.problem("chain", "", "%v", err)
		return nil
	}
	got, err := tree.Scan(v.n.Root, manifests.IsNodeState)
	if err != nil {
		return err
	}
	have := tree.NewState(got)
	var drift []string
	for p, w := range want {
		g, ok := have[p]
		switch {
		case !ok:
			drift = append(drift, p)
			a.problem("drift", p, "/%s is missing", p)
		case g != w:
			drift = append(drift, p)
			a.problem("drift", p, "/%s differs: %s", p, diffEntry(w, g))
		}
	}
	for p, g := range have {
		if _, ok := want[p]; !ok {
			if g.Type == manifests.TypeDir && manifests.Within(manifests.StateDir, p) {
				continue // a parent of the state directory that strata made
			}
			drift = append(drift, p)
			a.problem("drift", p, "/%s is not part of the expected tree", p)
		}
	}
	sort.Slice(a.Findings, func(i, j int) bool { return a.Findings[i].Path < a.Findings[j].Path })
	d := manifests.TreeDigest(withoutStateParents(got, want))
	if d != v.ledger.Last().TreeDigest && len(drift) == 0 {
		a.problem("drift", "", "tree digest %s, ledger says %s", d, v.ledger.Last().TreeDigest)
	}
	a.TreeDigest = d
	return nil
}

func diffEntry(want, got manifests.Entry) string {
	var parts []string
	if want.Type != got.Type {
		parts = append(parts, fmt.Sprintf("type %s, expected %s", got.Type, want.Type))
	}
	if want.SHA256 != got.SHA256 || want.Size != got.Size {
		parts = append(parts, "content changed")
	}
	if want.Mode != got.Mode {
		parts = append(parts, fmt.Sprintf("mode %04o, expected %04o", uint32(got.Mode), uint32(want.Mode)))
	}
	if want.UID != got.UID || want.GID != got.GID {
		parts = append(parts, fmt.Sprintf("owner %d:%d, expected %d:%d", got.UID, got.GID, want.UID, want.GID))
	}
	if want.Target != got.Target {
		parts = append(parts, fmt.Sprintf("link target %q, expected %q", got.Target, want.Target))
	}
	return strings.Join(parts, "; ")
}

// VerifyRepo audits a repository: the index signature, every image and
// overlay signature and digest, parent links, monotonic versions, each
// overlay's tree digest against the folded chain, and image constraints.
// trust nil uses the keys the images list.
func VerifyRepo(repoDir string, trust *sign.KeySet) (*Audit, error) {
	a := &Audit{Repo: repoDir, Findings: []Finding{}}
	r, err := repo.Open(repoDir, trust)
	if err != nil {
		a.problem("signature", "", "%v", err)
		return a, nil
	}
	indexed := map[string]bool{}
	for _, l := range r.Index.Lines {
		indexed[filepath.Clean(l.Image.File)] = true
		for _, o := range l.Overlays {
			indexed[filepath.Clean(o.File)] = true
		}
		if sum, err := repo.FileSHA256(r.Path(l.Image.File)); err != nil {
			a.problem("tampered", "", "line %s: image %s: %v", l.Name, l.Image.File, err)
		} else if sum != l.Image.SHA256 {
			a.problem("tampered", "", "line %s: image %s has sha256 %s, index says %s", l.Name, l.Image.File, sum, l.Image.SHA256)
		}
		c, err := LoadChain(r, l.Name, "", trust)
		if err != nil {
			a.problem("chain", "", "line %s: %v", l.Name, err)
			continue
		}
		for _, o := range c.Overlays {
			ok, err := manifests.Satisfies(c.Image.Manifest.Version, o.Manifest.Requires.Image)
			if err != nil || !ok {
				a.problem("constraint", "", "line %s: overlay %s requires image %s, line image is %s", l.Name, o.Manifest.Version, o.Manifest.Requires.Image, c.Image.Manifest.Version)
			}
		}
		h := c.Head()
		a.RepoHead, a.Line = &h, l.Name
	}
	stray, _ := filepath.Glob(filepath.Join(repoDir, "overlays", "*"))
	for _, s := range stray {
		rel, _ := filepath.Rel(repoDir, s)
		if !indexed[rel] && !strings.HasPrefix(filepath.Base(s), ".") {
			a.warn("unknown", "%s is not in the index", rel)
		}
	}
	if _, err := os.Stat(filepath.Join(repoDir, "index.json")); err != nil {
		return nil, err
	}
	return a, nil
}

// withoutStateParents drops directories strata created only to hold its
// state directory (such as /var when the image has none).
func withoutStateParents(got []manifests.Entry, want tree.State) []manifests.Entry {
	out := got[:0:0]
	for _, e := range got {
		if _, ok := want[e.Path]; !ok && e.Type == manifests.TypeDir && manifests.Within(manifests.StateDir, e.Path) {
			continue
		}
		out = append(out, e)
	}
	return out
}
