package node_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// newKey generates a key pair in dir and returns the secret key and the
// .pub file's bytes.
func newKey(t *testing.T, dir, name string) (*sign.Key, []byte) { return testenv.KeyIn(t, dir, name) }

// nodeKeys returns the ids of the keys the node at root trusts.
func nodeKeys(t *testing.T, root string) []string {
	t.Helper()
	ks, err := nodestate.Node{Root: root}.TrustedKeys()
	if err != nil {
		t.Fatal(err)
	}
	return ks.IDs()
}

func nodeHead(t *testing.T, root string) string {
	t.Helper()
	_, head, _, _, err := fixture.Expected(t, root)
	if err != nil {
		t.Fatal(err)
	}
	return head.Version
}

// A key rotation replaces the line's key A by B: a node that missed it
// catches up in order, from the line's image or from the middle; after it
// overlays and indexes signed by A are refused everywhere, B signs, the
// audits pass with the node's keys or the auditor's A, and a regenerated
// image trusts B only.
func TestKeyRotation(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	a := f.Key
	b, bPub := newKey(t, f.Dir, "b")
	f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	fromImage := f.Provision()
	mid := f.Provision()
	if _, err := nodetest.Apply(ctx, mid, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}

	// Revoking the key that signs needs the new key for the index.
	before := repoSnap(t, f.Repo)
	_, err := overlay.RotateKeys(ctx, f.Repo, a, overlay.RotateOptions{Add: [][]byte{bPub}, Revoke: []string{a.ID()}})
	fixture.ErrIs(t, err, overlay.ErrRotation, "--index-key", a.ID())
	repoUnchanged(t, f.Repo, before)

	rot, err := overlay.RotateKeys(ctx, f.Repo, a, overlay.RotateOptions{Add: [][]byte{bPub}, Revoke: []string{a.ID()}, IndexKey: b})
	if err != nil {
		t.Fatal(err)
	}
	if rot.Manifest.Version != "1.0.2" || len(rot.Manifest.Entries) != 1 || len(rot.Manifest.Deletes) != 1 {
		t.Fatalf("rotation manifest %s: %d entries, %d deletes; want 1.0.2 writing B's key file and deleting A's", rot.Manifest.Version, len(rot.Manifest.Entries), len(rot.Manifest.Deletes))
	}
	r, err := repo.Open(context.Background(), f.Repo, nil)
	if err != nil {
		t.Fatalf("opening the rotated repository with its image's keys: %v", err)
	}
	if r.KeyID != b.ID() {
		t.Errorf("index signed by %s, want the new key %s", r.KeyID, b.ID())
	}

	// A is no longer trusted to sign; B is.
	_, err = overlay.Create(ctx, f.Repo, a, f.Change("/etc/motd", "a\n"), overlay.CreateOptions{Version: "1.0.3"})
	fixture.ErrIs(t, err, sign.ErrBadSignature, a.ID(), "1.0.2")
	f.Key = b
	f.Create("1.0.3", f.Change("/etc/motd", "b\n"))

	for name, root := range map[string]string{"from the image": fromImage, "from 1.0.1": mid} {
		if _, err := nodetest.Apply(ctx, root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{}); err != nil {
			t.Fatalf("node %s catching up through the rotation: %v", name, err)
		}
		if got := nodeHead(t, root); got != "1.0.3" {
			t.Errorf("node %s at %s, want 1.0.3", name, got)
		}
		if got := nodeKeys(t, root); !slices.Equal(got, []string{b.ID()}) {
			t.Errorf("node %s trusts %v, want only %s", name, got, b.ID())
		}
		au, err := nodetest.Verify(ctx, root, node.VerifyOptions{Repo: f.Repo, Files: true})
		if err != nil || !au.OK() {
			t.Errorf("audit of node %s: %v %+v", name, err, au)
		}
	}
	// An auditor names B, which signs the index, and A for the history
	// before the rotation; A alone, or B alone, does not pass.
	aOnly, _ := a.PublicKeySet()
	bOnly, _ := b.PublicKeySet()
	if au, err := overlay.VerifyRepoAs(ctx, f.Repo, bOnly, aOnly); err != nil || !au.OK() {
		t.Errorf("repository audit with B and A's history: %v %+v", err, au)
	}
	if au, err := nodetest.Verify(ctx, fromImage, node.VerifyOptions{Repo: f.Repo, Files: true, Trust: bOnly, History: aOnly}); err != nil || !au.OK() {
		t.Errorf("node audit with B and A's history: %v %+v", err, au)
	}
	if au, err := overlay.VerifyRepo(ctx, f.Repo, aOnly); err != nil || au.OK() || !fixture.HasFinding(au, "signature", "not by the auditor's key") {
		t.Errorf("repository audit with A alone: %v %+v, want the index refused", err, au)
	}
	if au, err := nodetest.Verify(ctx, fromImage, node.VerifyOptions{Repo: f.Repo, Trust: bOnly}); err != nil || au.OK() || !fixture.HasFinding(au, "signature", "image manifest") {
		t.Errorf("node audit with B alone: %v %+v, want the image's signature refused", err, au)
	}

	// Files in order work too, on a node that never saw the repository.
	byFiles := f.Provision()
	var files []string
	for _, o := range r.Index.Lines[0].Overlays {
		files = append(files, r.Path(o.File))
	}
	if _, err := apply(byFiles, files...); err != nil {
		t.Fatalf("applying the rotation from files: %v", err)
	}
	if got := nodeKeys(t, byFiles); !slices.Equal(got, []string{b.ID()}) {
		t.Errorf("node by files trusts %v, want %s", got, b.ID())
	}

	// Rolling the rotation back on a node brings A back, as it was.
	if _, err := nodetest.Rollback(ctx, mid, "", node.Options{}); err != nil { // 1.0.3
		t.Fatal(err)
	}
	if _, err := nodetest.Rollback(ctx, mid, "", node.Options{}); err != nil { // 1.0.2
		t.Fatal(err)
	}
	if got := nodeKeys(t, mid); !slices.Equal(got, []string{a.ID()}) {
		t.Errorf("after rolling the rotation back the node trusts %v, want %s", got, a.ID())
	}

	// A regenerated head trusts B only; signed by B, it verifies the
	// line with A's key added for what came before the rotation.
	_, err = builder.Regenerate(ctx, f.Repo, "", "", filepath.Join(f.Dir, "regen-bad"), builder.WithKey(b))
	fixture.ErrIs(t, err, sign.ErrBadSignature, a.ID())
	res, err := builder.Regenerate(ctx, f.Repo, "", "", filepath.Join(f.Dir, "regen"), builder.WithKey(b), builder.WithTrust(aOnly))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ManifestData.Keys) != 1 || !slices.Equal(keyIDs(t, res.ManifestData.Keys), []string{b.ID()}) {
		t.Errorf("regenerated image keys %v, want %s", res.ManifestData.Keys, b.ID())
	}
	_, err = builder.Regenerate(ctx, f.Repo, "", "", filepath.Join(f.Dir, "regen-a"), builder.WithKey(a))
	fixture.ErrIs(t, err, sign.ErrBadSignature, a.ID(), "not by --key")
	fresh := filepath.Join(t.TempDir(), "node")
	if _, err := builder.Provision(ctx, res.Image, fresh, nil); err != nil {
		t.Fatal(err)
	}
	if got := nodeKeys(t, fresh); !slices.Equal(got, []string{b.ID()}) {
		t.Errorf("node from the regenerated image trusts %v, want %s", got, b.ID())
	}
	f.Create("1.0.4", f.Change("/etc/motd", "c\n"))
	if _, err := nodetest.Apply(ctx, fresh, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatalf("node from the regenerated image applying 1.0.4: %v", err)
	}
}

// After a rotation, what the revoked key signs is refused: an overlay
// slipped into an index the new key signs, and an index it signs itself.
// A node behind the rotation is not fooled by a rotation the attacker's
// own key signs.
func TestRevokedKeyRefused(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	a := f.Key
	b, bPub := newKey(t, f.Dir, "b")
	x, xPub := newKey(t, f.Dir, "x")
	behind := f.Provision()
	if _, err := overlay.RotateKeys(ctx, f.Repo, a, overlay.RotateOptions{Add: [][]byte{bPub}, Revoke: []string{a.ID()}, IndexKey: b}); err != nil {
		t.Fatal(err)
	}
	root := f.Provision()
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	good := repoSnap(t, f.Repo)

	// An overlay A signs, continuing the head, listed by an index B signs.
	m := fixture.HeadManifest(t, root, "1.0.2", []manifests.Entry{fixture.ContentEntry("etc/motd", "evil\n")}, nil)
	m.Unclaimed = []string{"etc/motd"}
	evil := filepath.Join(f.Repo, "overlays", "evil.overlay.tar.zst")
	raw := craft(t, evil, m, a, []member{fixture.FileMember(m.Entries[0], []byte("evil\n"))})
	addToIndex(t, f.Repo, b, m, raw, evil)
	before := fixture.Snap(t, root)
	_, err := nodetest.Apply(ctx, root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{})
	fixture.ErrIs(t, err, sign.ErrBadSignature, a.ID())
	fixture.AssertUnchanged(t, root, before)
	_, err = apply(root, evil)
	fixture.ErrIs(t, err, sign.ErrBadSignature, a.ID())
	fixture.AssertUnchanged(t, root, before)

	// The same index, signed by A.
	idx, _ := indexFiles(t, f.Repo)
	putIndex(t, f.Repo, idx, a.Sign(idx, sign.IndexComment))
	_, err = nodetest.Apply(ctx, root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{})
	fixture.ErrIs(t, err, sign.ErrBadSignature, a.ID())
	fixture.AssertUnchanged(t, root, before)
	restoreRepo(t, f.Repo, good)

	// X signs a rotation of its own making (adding X) and an index: a
	// node behind the real rotation still trusts A only, and refuses.
	os.Remove(evil)
	xr := fixture.HeadManifest(t, behind, "1.0.1", nil, nil)
	text, _ := manifests.KeyFile(pubString(t, xPub))
	xr.Entries = []manifests.Entry{fixture.ContentEntry(manifests.KeyPath(x.ID()), string(text))}
	xr.Keys = &manifests.Rotation{Add: []string{pubString(t, xPub)}, Revoke: []string{}}
	xr.TreeDigest = treeAfter(t, behind, xr)
	xfile := filepath.Join(f.Repo, "overlays", "x.overlay.tar.zst")
	raw = craft(t, xfile, xr, x, []member{fixture.FileMember(xr.Entries[0], text)})
	replaceIndex(t, f.Repo, x, xr, raw, xfile)
	before = fixture.Snap(t, behind)
	_, err = nodetest.Apply(ctx, behind, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{})
	fixture.ErrIs(t, err, sign.ErrBadSignature, x.ID(), "key rotations")
	fixture.AssertUnchanged(t, behind, before)
}

// Rotations that cannot be made are refused before anything is written.
func TestKeyRotationRefusals(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	a := f.Key
	_, bPub := newKey(t, f.Dir, "b")
	aPub, err := os.ReadFile(filepath.Join(f.Dir, "k.pub"))
	if err != nil {
		t.Fatal(err)
	}
	secret, err := os.ReadFile(filepath.Join(f.Dir, "b.key"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := newKey(t, f.Dir, "other")
	for _, tc := range []struct {
		name string
		key  *sign.Key
		o    overlay.RotateOptions
		want error
		says string
	}{
		{"nothing", a, overlay.RotateOptions{}, overlay.ErrRotation, "nothing to do"},
		{"already trusted", a, overlay.RotateOptions{Add: [][]byte{aPub}}, overlay.ErrRotation, "trusted already"},
		{"added twice", a, overlay.RotateOptions{Add: [][]byte{bPub, bPub}}, overlay.ErrRotation, "named twice"},
		{"secret key", a, overlay.RotateOptions{Add: [][]byte{secret}}, overlay.ErrRotation, "public key"},
		{"revoke unknown", a, overlay.RotateOptions{Revoke: []string{"0123456789ABCDEF"}}, overlay.ErrRotation, "not one the line trusts"},
		{"revoke garbage", a, overlay.RotateOptions{Revoke: []string{"../../etc/passwd"}}, overlay.ErrRotation, "not one the line trusts"},
		{"revoke every key", a, overlay.RotateOptions{Revoke: []string{a.ID()}}, overlay.ErrRotation, "no key would be left"},
		{"untrusted signer", other, overlay.RotateOptions{Add: [][]byte{bPub}}, sign.ErrBadSignature, other.ID()},
		{"untrusted index key", a, overlay.RotateOptions{Add: [][]byte{bPub}, IndexKey: other}, overlay.ErrRotation, other.ID()},
		{"version not greater", a, overlay.RotateOptions{Add: [][]byte{bPub}, Version: "1.0.0"}, manifests.ErrRejected, "1.0.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := repoSnap(t, f.Repo)
			_, err := overlay.RotateKeys(ctx, f.Repo, tc.key, tc.o)
			fixture.ErrIs(t, err, tc.want, tc.says)
			repoUnchanged(t, f.Repo, before)
		})
	}
}

func keyIDs(t *testing.T, pubs []string) []string {
	t.Helper()
	var out []string
	for _, p := range pubs {
		id, err := manifests.KeyID(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func pubString(t *testing.T, pub []byte) string {
	t.Helper()
	ks, err := sign.NewKeySet(pub)
	if err != nil {
		t.Fatal(err)
	}
	return ks.Strings()[0]
}

// treeAfter returns the digest of the node's expected tree after m.
func treeAfter(t *testing.T, root string, m *manifests.OverlayManifest) string {
	t.Helper()
	_, _, _, state, err := fixture.Expected(t, root)
	if err != nil {
		t.Fatal(err)
	}
	next, err := state.Apply(m.Entries, m.Deletes)
	if err != nil {
		t.Fatal(err)
	}
	return next.Digest()
}

// addToIndex appends the crafted overlay file to the index and signs it
// with key.
func addToIndex(t *testing.T, dir string, key *sign.Key, m *manifests.OverlayManifest, raw []byte, file string) {
	t.Helper()
	editIndex(t, dir, key, func(l *manifests.Line) {
		l.Overlays = append(l.Overlays, indexRef(t, dir, m, raw, file))
	})
}

// replaceIndex makes the crafted overlay the line's only one.
func replaceIndex(t *testing.T, dir string, key *sign.Key, m *manifests.OverlayManifest, raw []byte, file string) {
	t.Helper()
	editIndex(t, dir, key, func(l *manifests.Line) {
		l.Overlays = []manifests.OverlayRef{indexRef(t, dir, m, raw, file)}
	})
}

func indexRef(t *testing.T, dir string, m *manifests.OverlayManifest, raw []byte, file string) manifests.OverlayRef {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(dir, file)
	return manifests.OverlayRef{Version: m.Version, File: rel, Digest: manifests.Digest(raw), SHA256: sqSHA(data), Size: int64(len(data)), Parent: m.Parent}
}

func editIndex(t *testing.T, dir string, key *sign.Key, edit func(*manifests.Line)) {
	t.Helper()
	raw, _ := indexFiles(t, dir)
	var x manifests.Index
	if err := json.Unmarshal(raw, &x); err != nil {
		t.Fatal(err)
	}
	edit(&x.Lines[0])
	x.Serial++
	out, err := manifests.Encode(&x)
	if err != nil {
		t.Fatal(err)
	}
	putIndex(t, dir, out, key.Sign(out, sign.IndexComment))
}

// repoSnap is every file of a repository directory by path.
func repoSnap(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func repoUnchanged(t *testing.T, dir string, before map[string]string) {
	t.Helper()
	after := repoSnap(t, dir)
	for p, b := range before {
		if after[p] != b {
			t.Errorf("%s changed", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok && filepath.Base(p) != repo.LockFile {
			t.Errorf("%s appeared", p)
		}
	}
}

func restoreRepo(t *testing.T, dir string, snap map[string]string) {
	t.Helper()
	for p, b := range snap {
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// What the review of key rotation found, held: a chain forged with an old
// key cannot be laundered through regenerate --key NEW; an index re-signed
// with a revoked key is refused by writers, audits, refresh and a node
// behind the rotation.
func TestRotationForgeries(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	a := f.Key
	b, bPub := newKey(t, f.Dir, "b")
	behind := f.Provision()
	forged := filepath.Join(f.Dir, "forged")
	if out, err := exec.Command("cp", "-a", f.Repo, forged).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := overlay.RotateKeys(ctx, f.Repo, a, overlay.RotateOptions{Add: [][]byte{bPub}, Revoke: []string{a.ID()}, IndexKey: b}); err != nil {
		t.Fatal(err)
	}
	f.Key = b
	f.Create("1.0.2", f.Change("/etc/motd", "b\n"))

	// Whoever holds A forges a history: an evil overlay, then a rotation
	// adding B that keeps A, the index signed by A.
	if _, err := overlay.Create(ctx, forged, a, f.Change("/etc/motd", "evil\n"), overlay.CreateOptions{Version: "1.0.1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := overlay.RotateKeys(ctx, forged, a, overlay.RotateOptions{Add: [][]byte{bPub}}); err != nil {
		t.Fatal(err)
	}
	aOnly, _ := a.PublicKeySet()
	_, err := builder.Regenerate(ctx, forged, "", "", filepath.Join(f.Dir, "laundered"), builder.WithKey(b), builder.WithTrust(aOnly))
	fixture.ErrIs(t, err, sign.ErrBadSignature, "not by --key")

	// The real index, re-signed with the revoked A.
	raw, _ := indexFiles(t, f.Repo)
	putIndex(t, f.Repo, raw, a.Sign(raw, sign.IndexComment))
	before := repoSnap(t, f.Repo)
	_, err = overlay.Create(ctx, f.Repo, b, f.Change("/etc/motd", "c\n"), overlay.CreateOptions{Version: "1.0.3"})
	fixture.ErrIs(t, err, sign.ErrBadSignature, a.ID(), "no longer trusts")
	_, err = repo.Refresh(context.Background(), f.Repo, a, 0)
	fixture.ErrIs(t, err, sign.ErrBadSignature, a.ID(), "no longer trusts")
	repoUnchanged(t, f.Repo, before)
	if au, err := overlay.VerifyRepo(ctx, f.Repo, nil); err != nil || au.OK() || !fixture.HasFinding(au, "signature", "no longer trusts") {
		t.Errorf("audit of an index signed by the revoked key: %v %+v", err, au)
	}
	// A node behind the rotation still trusts A, so A's signature
	// verifies; at the head its keys are B's, and it refuses.
	snapBefore := fixture.Snap(t, behind)
	_, err = nodetest.Apply(ctx, behind, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{})
	fixture.ErrIs(t, err, sign.ErrBadSignature, a.ID(), "no longer trusts")
	fixture.AssertUnchanged(t, behind, snapBefore)
}
