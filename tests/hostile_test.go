package tests

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/archive/archivetest"
	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// The hostile-input suite (issue 7): strata driven from the command line
// the way an attacker would, each case on a fresh copy of a provisioned
// node and repository. Every case checks the exit status, that the
// message names the problem, that the node is unchanged (a recursive
// digest of every path with its type, owner, mode, size, content and link
// target, node state included) and that a canary directory outside the
// node is unchanged too. The classes that already held are here so they
// keep holding.

// hostileBase is built once: a demo image signed by the line's key, a
// repository with overlays 1.0.1 and 1.0.2, and a node provisioned at the
// image. Cases copy it.
type hostileBase struct {
	dir     string
	key     *sign.Key
	keyPath string
	other   *sign.Key // a key no node trusts
	image   string
	ov1     string // repo/overlays/demo-1.0.1...
	ov2     string
}

var (
	hostileOnce sync.Once
	hostile     *hostileBase
	hostileErr  error
)

func strata(args ...string) (string, int) {
	cmd := exec.Command(strataBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return out.String(), code
}

func buildHostileBase() (*hostileBase, error) {
	dir, err := os.MkdirTemp("", "strata-hostile-")
	if err != nil {
		return nil, err
	}
	b := &hostileBase{dir: dir, keyPath: filepath.Join(dir, "line.key")}
	run := func(args ...string) error {
		if out, code := strata(args...); code != 0 {
			return fmt.Errorf("strata %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
		return nil
	}
	if err := run("key", "generate", "--out", filepath.Join(dir, "line")); err != nil {
		return nil, err
	}
	if err := run("key", "generate", "--out", filepath.Join(dir, "other")); err != nil {
		return nil, err
	}
	if b.key, err = sign.LoadKey(b.keyPath); err != nil {
		return nil, err
	}
	if b.other, err = sign.LoadKey(filepath.Join(dir, "other.key")); err != nil {
		return nil, err
	}
	if err := os.CopyFS(filepath.Join(dir, "demo"), os.DirFS(demoDir)); err != nil {
		return nil, err
	}
	if err := run("build-image", filepath.Join(dir, "demo", "recipe.yaml"), "--out", filepath.Join(dir, "img"), "--key", b.keyPath); err != nil {
		return nil, err
	}
	b.image = filepath.Join(dir, "img", "demo-1.0.0.squashfs")
	rp := filepath.Join(dir, "repo")
	if err := run("repo", "init", rp, "--image", b.image, "--key", b.keyPath); err != nil {
		return nil, err
	}
	for v, content := range map[string]string{"1.0.1": "listen 8081\n", "1.0.2": "listen 8082\n"} {
		src := filepath.Join(dir, "web-"+v)
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			return nil, err
		}
		_ = src
	}
	for _, v := range []string{"1.0.1", "1.0.2"} {
		if err := run("overlay", "create", "--repo", rp, "--version", v, "--key", b.keyPath, "--add", "/etc/demo/web.conf="+filepath.Join(dir, "web-"+v)); err != nil {
			return nil, err
		}
	}
	b.ov1 = filepath.Join(rp, "overlays", "demo-1.0.1.overlay.tar.zst")
	b.ov2 = filepath.Join(rp, "overlays", "demo-1.0.2.overlay.tar.zst")
	if err := run("provision", "--image", b.image, "--root", filepath.Join(dir, "node")); err != nil {
		return nil, err
	}
	// The lock file a first run creates; it is not what a case changes.
	if err := os.WriteFile(filepath.Join(dir, "node", manifests.StateDir, "lock"), nil, 0o644); err != nil {
		return nil, err
	}
	return b, nil
}

// hcase is one hostile case's world: copies of the node and repository,
// a canary directory outside the node, and a scratch directory.
type hcase struct {
	t       *testing.T
	b       *hostileBase
	root    string
	repo    string
	canary  string
	scratch string
}

func newHCase(t *testing.T) *hcase {
	t.Helper()
	hostileOnce.Do(func() { hostile, hostileErr = buildHostileBase() })
	if hostileErr != nil {
		t.Fatal(hostileErr)
	}
	dir := t.TempDir()
	c := &hcase{t: t, b: hostile, root: filepath.Join(dir, "node"), repo: filepath.Join(dir, "repo"), canary: filepath.Join(dir, "canary"), scratch: filepath.Join(dir, "scratch")}
	for _, d := range [][2]string{{filepath.Join(hostile.dir, "node"), c.root}, {filepath.Join(hostile.dir, "repo"), c.repo}} {
		if out, err := exec.Command("cp", "-a", d[0], d[1]).CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v: %s", d[0], err, out)
		}
	}
	for _, d := range []string{c.canary, c.scratch} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(c.canary, "victim"), []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// digestTree is a recursive digest of dir: every path with its type,
// owner, mode, size, content hash and link target. Special files are
// described, never opened.
func digestTree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %o %d:%d %d", rel, st.Mode, st.Uid, st.Gid, st.Size)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		case syscall.S_IFLNK:
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// refused runs strata with args and requires exit status code, an output
// naming every one of mention, and the node and canary unchanged.
func (c *hcase) refused(code int, mention []string, args ...string) {
	c.t.Helper()
	node, canary := digestTree(c.t, c.root), digestTree(c.t, c.canary)
	out, got := strataTimeout(c.t, 60*time.Second, args...)
	if got != code {
		c.t.Errorf("strata %s: exit %d, want %d:\n%s", strings.Join(args, " "), got, code, out)
	}
	for _, m := range mention {
		if !strings.Contains(out, m) {
			c.t.Errorf("strata %s: output does not name %q:\n%s", strings.Join(args, " "), m, out)
		}
	}
	if digestTree(c.t, c.root) != node {
		c.t.Errorf("strata %s changed the node", strings.Join(args, " "))
	}
	if digestTree(c.t, c.canary) != canary {
		c.t.Errorf("strata %s changed the canary outside the node", strings.Join(args, " "))
	}
}

// strataTimeout runs strata, killing it (and failing) if it hangs: a
// hostile input must be refused, not wait forever.
func strataTimeout(t *testing.T, limit time.Duration, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(strataBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return out.String(), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), 0
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("strata %s hung (killed after %s)", strings.Join(args, " "), limit)
		return "", -1
	}
}

// member is one tar member of an overlay archive.
type member = archivetest.Member

// resigned returns the members of overlay src with its manifest's raw
// JSON replaced by edit(raw) and signed by key with comment (""
// for the manifest's own), so only what edit did differs.
func (c *hcase) resigned(src string, key *sign.Key, comment string, edit func(raw []byte) []byte) []member {
	c.t.Helper()
	ms := archivetest.Read(c.t, src)
	raw := edit(ms[0].Data)
	if comment == "" {
		// The comment the edited manifest's own signer would write;
		// an edit strict decoding refuses keeps the original's.
		var m manifests.OverlayManifest
		if err := manifests.Decode(raw, &m); err != nil {
			if err := manifests.Decode(ms[0].Data, &m); err != nil {
				c.t.Fatal(err)
			}
		}
		comment = sign.OverlayComment(m.Line, m.Version)
	}
	ms[0].Data = raw
	ms[1].Data = key.Sign(raw, comment)
	return ms
}

// edited decodes a manifest, lets fn change it and encodes it again.
func edited(t *testing.T, fn func(m *manifests.OverlayManifest)) func([]byte) []byte {
	return func(raw []byte) []byte {
		var m manifests.OverlayManifest
		if err := manifests.Decode(raw, &m); err != nil {
			t.Fatal(err)
		}
		fn(&m)
		out, err := manifests.Encode(&m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// write packs members into the scratch directory and returns the path.
func (c *hcase) write(name string, algo compress.Algorithm, ms []member) string {
	c.t.Helper()
	p := filepath.Join(c.scratch, name)
	archivetest.Pack(c.t, p, algo, ms)
	return p
}

// plantUndo applies 1.0.1 (which replaces /etc/demo/web.conf) to the node
// and lets plant change the undo data it kept (the directory of displaced
// objects).
func (c *hcase) plantUndo(plant func(old string)) {
	c.t.Helper()
	if out, code := strata(c.apply(c.b.ov1)...); code != 0 {
		c.t.Fatalf("apply 1.0.1: exit %d: %s", code, out)
	}
	old := filepath.Join(c.root, manifests.StateDir, "undo", "1.0.1", "old")
	if _, err := os.Lstat(filepath.Join(old, "0")); err != nil {
		c.t.Fatalf("no undo data for 1.0.1: %v", err)
	}
	plant(old)
}

func (c *hcase) apply(args ...string) []string {
	return append([]string{"apply-overlay", "--root", c.root, "--restart-with", "none"}, args...)
}

func replace(old, new string) func([]byte) []byte {
	return func(raw []byte) []byte { return []byte(strings.Replace(string(raw), old, new, 1)) }
}

func TestHostileInputs(t *testing.T) {
	type hc struct {
		name    string
		code    int
		mention []string
		run     func(c *hcase) []string // sets the scene, returns strata's arguments
	}
	entry := func(path, typ string, mode uint32, extra string) func(m *manifests.OverlayManifest) {
		return func(m *manifests.OverlayManifest) {
			e := manifests.Entry{Path: path, Type: manifests.EntryType(typ), Mode: manifests.Mode(mode)}
			switch e.Type {
			case manifests.TypeFile:
				e.Size, e.SHA256 = 3, strings.Repeat("a", 64)
			case manifests.TypeSymlink:
				e.Target = extra
			}
			m.Entries = append(m.Entries, e)
			sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Path < m.Entries[j].Path })
		}
	}
	cases := []hc{
		// Signatures and what they say they sign.
		{"unsigned overlay", 3, []string{"not signed"}, func(c *hcase) []string {
			ms := archivetest.Read(c.t, c.b.ov1)
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, append(ms[:1:1], ms[2:]...)))
		}},
		{"signed by an untrusted key", 3, []string{"not valid for any trusted key"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.other, "", func(b []byte) []byte { return b })))
		}},
		{"signature made as an index's", 3, []string{`"strata index"`}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, sign.IndexComment, func(b []byte) []byte { return b })))
		}},
		{"signature made for another version", 3, []string{"strata overlay demo-9.9.9"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, sign.OverlayComment("demo", "9.9.9"), func(b []byte) []byte { return b })))
		}},
		{"manifest altered after signing", 3, []string{"not valid"}, func(c *hcase) []string {
			ms := archivetest.Read(c.t, c.b.ov1)
			ms[0].Data = bytes.Replace(ms[0].Data, []byte(`"1.0.1"`), []byte(`"1.0.3"`), 1)
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, ms))
		}},
		// Decoding: strict JSON, bounded decompression.
		{"duplicate JSON name", 3, []string{"appears twice"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", replace(`"version": "1.0.1"`, `"version": "1.0.1", "version": "1.0.1"`))))
		}},
		{"name differing only in case", 3, []string{"must be spelled"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", replace(`"entries"`, `"ENTRIES"`))))
		}},
		{"Kelvin sign for k", 3, []string{"must be spelled"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", replace(`"kind"`, "\"\u212aind\""))))
		}},
		{"xz asking for a 1.5 GiB dictionary", 3, []string{"dictionary"}, func(c *hcase) []string {
			p := c.write("x.overlay.tar.xz", compress.Xz, archivetest.Read(c.t, c.b.ov1))
			b, _ := os.ReadFile(p)
			hugeDict(c.t, b)
			_ = os.WriteFile(p, b, 0o644)
			return c.apply(p)
		}},
		{"zstd asking for a 2 GiB window", 3, []string{"window"}, func(c *hcase) []string {
			p := filepath.Join(c.scratch, "x.overlay.tar.zst")
			raw := c.write("x.overlay.tar", compress.None, archivetest.Read(c.t, c.b.ov1))
			// From a pipe: zstd cannot shrink the window to a known size.
			cmd := exec.Command("sh", "-c", `zstd -q -c --long=31 <"$1" >"$2"`, "sh", raw, p)
			if out, err := cmd.CombinedOutput(); err != nil {
				c.t.Fatalf("zstd: %v: %s", err, out)
			}
			return c.apply(p)
		}},
		{"truncated archive", 3, nil, func(c *hcase) []string {
			b, _ := os.ReadFile(c.b.ov1)
			p := filepath.Join(c.scratch, "x.overlay.tar.zst")
			_ = os.WriteFile(p, b[:len(b)/2], 0o644)
			return c.apply(p)
		}},
		{"not an archive", 3, nil, func(c *hcase) []string {
			p := filepath.Join(c.scratch, "x.overlay.tar.zst")
			_ = os.WriteFile(p, bytes.Repeat([]byte("garbage "), 100), 0o644)
			return c.apply(p)
		}},
		{"signature member first", 3, []string{".strata/overlay.json"}, func(c *hcase) []string {
			ms := archivetest.Read(c.t, c.b.ov1)
			ms[0], ms[1] = ms[1], ms[0]
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, ms))
		}},
		// Overlay files that are not files.
		{"overlay file is a FIFO", 3, []string{"FIFO"}, func(c *hcase) []string {
			p := filepath.Join(c.scratch, "x.overlay.tar.zst")
			_ = syscall.Mkfifo(p, 0o644)
			return c.apply(p)
		}},
		{"overlay file is /dev/zero", 3, []string{"character device"}, func(c *hcase) []string { return c.apply("/dev/zero") }},
		{"overlay file links to /dev/zero", 3, []string{"character device"}, func(c *hcase) []string {
			p := filepath.Join(c.scratch, "x.overlay.tar.zst")
			_ = os.Symlink("/dev/zero", p)
			return c.apply(p)
		}},
		{"overlay file is a directory", 3, []string{"directory"}, func(c *hcase) []string { return c.apply(c.scratch) }},
		// Manifest content, validly signed by the line's key.
		{"path traversal", 3, []string{".."}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, entry("etc/../../x", "file", 0o644, "")))))
		}},
		{"writes the ledger", 3, []string{"ledger.json"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, entry(manifests.LedgerPath, "file", 0o644, "")))))
		}},
		{"adds a trusted key", 3, []string{"key rotation"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, entry(manifests.KeysDir+"/evil.pub", "file", 0o644, "")))))
		}},
		{"replaces a key by a symlink out", 3, []string{"key rotation"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, entry(manifests.KeysDir+"/"+c.b.key.ID()+".pub", "symlink", 0o777, "/tmp/evil.pub")))))
		}},
		{"deletes a trusted key", 3, []string{"holds strata's own files"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Deletes = append(m.Deletes, manifests.KeysDir+"/"+c.b.key.ID()+".pub")
			}))))
		}},
		{"hands var/lib to a user", 3, []string{"root's"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				entry("var/lib", "dir", 0o777, "")(m)
			}))))
		}},
		{"makes usr a symlink", 3, []string{"usr"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, entry("usr", "symlink", 0o777, "/tmp")))))
		}},
		{"deletes /usr", 3, []string{"holds strata's own files"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) { m.Deletes = []string{"usr"} }))))
		}},
		{"unit name runs a command", 3, []string{"reboot"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Services = []manifests.ServiceAction{{Unit: "$(reboot).service", Action: manifests.ActionRestart, Because: []string{"etc/demo/web.conf"}}}
			}))))
		}},
		{"unit name is an option", 3, []string{"--host=evil"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Services = []manifests.ServiceAction{{Unit: "--host=evil.service", Action: manifests.ActionRestart, Because: []string{}}}
			}))))
		}},
		{"catalog unit with a path", 3, []string{"../x.service"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Catalog = &manifests.Catalog{Services: []manifests.Service{{Unit: "../x.service"}}}
			}))))
		}},
		{"catalog validation command relative", 3, []string{"absolute"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Catalog = &manifests.Catalog{Services: []manifests.Service{{Unit: "demo-web.service", Validate: []string{"sh", "-c", "reboot"}}}}
			}))))
		}},
		{"device entry", 3, nil, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, entry("etc/demo/kmem", "chardev", 0o666, "")))))
		}},
		{"symlink escaping the root", 3, []string{"etc/demo/out"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, entry("etc/demo/out", "symlink", 0o777, "../../../../../etc/shadow")))))
		}},
		// Payload against manifest.
		{"payload differs from its entry", 3, []string{"sha256"}, func(c *hcase) []string {
			ms := archivetest.Read(c.t, c.b.ov1)
			last := &ms[len(ms)-1]
			last.Data = bytes.Repeat([]byte("x"), len(last.Data))
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, ms))
		}},
		{"extra payload member", 3, []string{"extra member"}, func(c *hcase) []string {
			ms := archivetest.Read(c.t, c.b.ov1)
			extra := member{Hdr: &tar.Header{Name: "etc/demo/extra", Typeflag: tar.TypeReg, Mode: 0o644}, Data: []byte("x")}
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, append(ms, extra)))
		}},
		{"payload member missing", 3, []string{"ends before"}, func(c *hcase) []string {
			ms := archivetest.Read(c.t, c.b.ov1)
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, ms[:2]))
		}},
		{"hard link member", 3, nil, func(c *hcase) []string {
			ms := archivetest.Read(c.t, c.b.ov1)
			last := &ms[len(ms)-1]
			last.Hdr.Typeflag, last.Hdr.Linkname, last.Data = tar.TypeLink, "etc/shadow", nil
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, ms))
		}},
		// Sequence.
		{"gap: 1.0.2 before 1.0.1", 3, []string{"missing: 1.0.1"}, func(c *hcase) []string { return c.apply(c.b.ov2) }},
		{"forged lineage under the right parent", 3, []string{"forged or foreign"}, func(c *hcase) []string {
			if out, code := strata(c.apply(c.b.ov1)...); code != 0 {
				c.t.Fatalf("setup: %s", out)
			}
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov2, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Lineage[0].Digest = manifests.Digest([]byte("another image"))
			}))))
		}},
		{"fork of the image", 3, []string{"a fork"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Lineage[0].Digest = manifests.Digest([]byte("x"))
				m.Parent = m.Lineage[0]
			}))))
		}},
		{"other line", 3, []string{"line other"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) { m.Line = "other" }))))
		}},
		{"image constraint not met", 3, []string{"requires image"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) { m.Requires.Image = ">=2.0.0" }))))
		}},
		{"another overlay of an applied version", 3, []string{"forks"}, func(c *hcase) []string {
			if out, code := strata(c.apply(c.b.ov1, c.b.ov2)...); code != 0 {
				c.t.Fatalf("setup: %s", out)
			}
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Created = "2026-06-01T00:00:00Z" // another 1.0.1, applied after 1.0.2
			}))))
		}},
		// The repository.
		{"index is /dev/zero", 3, []string{"not a regular file"}, func(c *hcase) []string {
			idx := filepath.Join(c.repo, repo.IndexFile)
			_ = os.Remove(idx)
			_ = os.Symlink("/dev/zero", idx)
			return c.apply("--repo", c.repo)
		}},
		{"refused repository apply records no index serial", 3, []string{"symlink"}, func(c *hcase) []string {
			// The index is authentic and current, the apply is refused
			// after it (a directory the overlay writes into is a planted
			// link): the node's freshness state must not move either
			// (issue 25; refused checks the state directory too).
			demo := filepath.Join(c.root, "etc/demo")
			_ = os.Rename(demo, demo+".moved")
			_ = os.Symlink(c.canary, demo)
			return c.apply("--repo", c.repo)
		}},
		{"index is a FIFO", 3, []string{"not a regular file"}, func(c *hcase) []string {
			idx := filepath.Join(c.repo, repo.IndexFile)
			_ = os.Remove(idx)
			_ = syscall.Mkfifo(idx, 0o644)
			return c.apply("--repo", c.repo)
		}},
		{"index is a device node", 3, []string{"not a regular file"}, func(c *hcase) []string {
			idx := filepath.Join(c.repo, repo.IndexFile)
			_ = os.Remove(idx)
			_ = syscall.Mknod(idx, syscall.S_IFCHR|0o644, int(mkdev(1, 5)))
			return c.apply("--repo", c.repo)
		}},
		{"index signed by an untrusted key", 3, []string{"not valid for any trusted key"}, func(c *hcase) []string {
			raw, _ := os.ReadFile(filepath.Join(c.repo, repo.IndexFile))
			_ = os.WriteFile(filepath.Join(c.repo, repo.SigPath(repo.IndexFile)), c.b.other.Sign(raw, sign.IndexComment), 0o644)
			return c.apply("--repo", c.repo)
		}},
		{"index signature made for an overlay", 3, []string{"strata index"}, func(c *hcase) []string {
			raw, _ := os.ReadFile(filepath.Join(c.repo, repo.IndexFile))
			_ = os.WriteFile(filepath.Join(c.repo, repo.SigPath(repo.IndexFile)), c.b.key.Sign(raw, sign.OverlayComment("demo", "1.0.1")), 0o644)
			return c.apply("--repo", c.repo)
		}},
		{"index with a name twice", 3, []string{"appears twice"}, func(c *hcase) []string {
			raw, _ := os.ReadFile(filepath.Join(c.repo, repo.IndexFile))
			raw = []byte(strings.Replace(string(raw), `"kind": "index"`, `"kind": "index", "kind": "index"`, 1))
			_ = os.WriteFile(filepath.Join(c.repo, repo.IndexFile), raw, 0o644)
			_ = os.WriteFile(filepath.Join(c.repo, repo.SigPath(repo.IndexFile)), c.b.key.Sign(raw, sign.IndexComment), 0o644)
			return c.apply("--repo", c.repo)
		}},
		{"replayed older index (rollback)", 3, []string{"rollback", "serial 2", "serial 3"}, func(c *hcase) []string {
			// The index after 1.0.1 (serial 2), signed then; the node
			// has accepted serial 3.
			old := indexAt(c.t, c.repo, 2)
			if out, code := strata(c.apply("--repo", c.repo, "--through", "1.0.1")...); code != 0 {
				c.t.Fatalf("setup: %s", out)
			}
			_ = os.WriteFile(filepath.Join(c.repo, repo.IndexFile), old, 0o644)
			_ = os.WriteFile(filepath.Join(c.repo, repo.SigPath(repo.IndexFile)), c.b.key.Sign(old, sign.IndexComment), 0o644)
			return c.apply("--repo", c.repo)
		}},
		{"expired index (freeze)", 3, []string{"expired"}, func(c *hcase) []string {
			raw, _ := os.ReadFile(filepath.Join(c.repo, repo.IndexFile))
			var x manifests.Index
			_ = manifests.Decode(raw, &x)
			x.Serial++
			x.Expires = "2026-01-01T00:00:00Z"
			out, _ := manifests.Encode(&x)
			_ = os.WriteFile(filepath.Join(c.repo, repo.IndexFile), out, 0o644)
			_ = os.WriteFile(filepath.Join(c.repo, repo.SigPath(repo.IndexFile)), c.b.key.Sign(out, sign.IndexComment), 0o644)
			return c.apply("--repo", c.repo)
		}},
		{"repository overlay swapped", 3, nil, func(c *hcase) []string {
			b, _ := os.ReadFile(c.b.ov2)
			_ = os.WriteFile(filepath.Join(c.repo, "overlays", "demo-1.0.1.overlay.tar.zst"), b, 0o644)
			return c.apply("--repo", c.repo)
		}},
		{"repository overlay is a FIFO", 3, []string{"not a regular file"}, func(c *hcase) []string {
			p := filepath.Join(c.repo, "overlays", "demo-1.0.1.overlay.tar.zst")
			_ = os.Remove(p)
			_ = syscall.Mkfifo(p, 0o644)
			return c.apply("--repo", c.repo)
		}},
		{"repository overlay links out of the repository", 3, nil, func(c *hcase) []string {
			p := filepath.Join(c.repo, "overlays", "demo-1.0.1.overlay.tar.zst")
			cp := filepath.Join(c.canary, "ov")
			b, _ := os.ReadFile(p)
			_ = os.WriteFile(cp, b, 0o644)
			_ = os.Remove(p)
			_ = os.Symlink(cp, p)
			return c.apply("--repo", c.repo)
		}},
		// Node state planted.
		{"undo directory links out", 3, []string{"undo is not a directory (symlink)"}, func(c *hcase) []string {
			_ = os.Symlink(c.canary, filepath.Join(c.root, manifests.StateDir, "undo"))
			return c.apply(c.b.ov1)
		}},
		{"manifest store links out", 3, []string{"overlays is not a directory (symlink)"}, func(c *hcase) []string {
			_ = os.Symlink(c.canary, filepath.Join(c.root, manifests.StateDir, "overlays"))
			return c.apply(c.b.ov1)
		}},
		{"txn is a file", 3, []string{"txn is not a directory"}, func(c *hcase) []string {
			_ = os.WriteFile(filepath.Join(c.root, manifests.StateDir, "txn"), nil, 0o644)
			return c.apply(c.b.ov1)
		}},
		{"var/lib links out", 3, []string{"/var/lib is not a directory (symlink)"}, func(c *hcase) []string {
			lib := filepath.Join(c.root, "var/lib")
			_ = os.Rename(lib, lib+".real")
			_ = os.Symlink(c.canary, lib)
			return c.apply(c.b.ov1)
		}},
		{"ledger hard-linked to a file outside", 3, []string{"hard links"}, func(c *hcase) []string {
			l := filepath.Join(c.root, manifests.LedgerPath)
			b, _ := os.ReadFile(l)
			_ = os.WriteFile(filepath.Join(c.canary, "ledger"), b, 0o644)
			_ = os.Remove(l)
			_ = os.Link(filepath.Join(c.canary, "ledger"), l)
			return c.apply(c.b.ov1)
		}},
		{"lock hard-linked to a file outside", 3, []string{"hard links"}, func(c *hcase) []string {
			l := filepath.Join(c.root, manifests.StateDir, "lock")
			_ = os.Remove(l)
			_ = os.Link(filepath.Join(c.canary, "victim"), l)
			return c.apply(c.b.ov1)
		}},
		{"ledger is a FIFO", 3, []string{"FIFO"}, func(c *hcase) []string {
			l := filepath.Join(c.root, manifests.LedgerPath)
			_ = os.Remove(l)
			_ = syscall.Mkfifo(l, 0o644)
			return c.apply(c.b.ov1)
		}},
		{"ledger record names a hostile unit", 3, []string{"invalid unit name"}, func(c *hcase) []string {
			l := filepath.Join(c.root, manifests.LedgerPath)
			raw, _ := os.ReadFile(l)
			var led manifests.Ledger
			_ = manifests.Decode(raw, &led)
			e := led.Last()
			e.Action, e.Pending = manifests.LedgerRestart, []manifests.ServiceAction{{Unit: "--host=evil.service", Action: manifests.ActionRestart, Because: []string{}}}
			_ = led.Append(e) // a correctly chained record: the field itself must be refused
			out, _ := manifests.Encode(&led)
			_ = os.WriteFile(l, out, 0o644)
			return c.apply(c.b.ov1)
		}},
		{"ledger record names a path", 3, []string{"not strict semver"}, func(c *hcase) []string {
			l := filepath.Join(c.root, manifests.LedgerPath)
			raw, _ := os.ReadFile(l)
			var led manifests.Ledger
			_ = manifests.Decode(raw, &led)
			e := led.Last()
			e.Action, e.Version = manifests.LedgerApply, "../../../../etc"
			_ = led.Append(e)
			out, _ := manifests.Encode(&led)
			_ = os.WriteFile(l, out, 0o644)
			return []string{"rollback", "--root", c.root, "--restart-with", "none"}
		}},
		{"index-serial is garbage", 3, []string{"not a serial"}, func(c *hcase) []string {
			_ = os.WriteFile(filepath.Join(c.root, manifests.StateDir, "index-serial"), []byte("lots\n"), 0o644)
			return c.apply("--repo", c.repo)
		}},
		{"restarting mark is a FIFO", 3, []string{"restarting is not a regular file (FIFO)"}, func(c *hcase) []string {
			_ = syscall.Mkfifo(filepath.Join(c.root, manifests.StateDir, "restarting"), 0o644)
			return c.apply(c.b.ov1)
		}},
		{"audit of a node with planted state", 3, []string{"symlink"}, func(c *hcase) []string {
			_ = os.Symlink(c.canary, filepath.Join(c.root, manifests.StateDir, "undo"))
			return []string{"verify-sequence", "--root", c.root, "--files"}
		}},
		{"rollback with planted state", 3, []string{"symlink"}, func(c *hcase) []string {
			_ = os.Symlink(c.canary, filepath.Join(c.root, manifests.StateDir, "overlays"))
			return []string{"rollback", "--root", c.root, "--restart-with", "none"}
		}},
		// Undo data is node state: rollback restores it only as the apply
		// displaced it (its type), never a FIFO, device or escaping link,
		// and follows no link in it.
		{"rollback restoring a planted symlink", 3, []string{"undo data for /etc/demo/web.conf", "is a symlink, but the apply displaced a file there"}, func(c *hcase) []string {
			c.plantUndo(func(old string) {
				_ = os.Remove(filepath.Join(old, "0"))
				_ = os.Symlink(filepath.Join(c.canary, "victim"), filepath.Join(old, "0"))
			})
			return []string{"rollback", "--root", c.root, "--restart-with", "none"}
		}},
		{"rollback restoring a FIFO", 3, []string{"undo data for /etc/demo/web.conf", "is a FIFO"}, func(c *hcase) []string {
			c.plantUndo(func(old string) {
				_ = os.Remove(filepath.Join(old, "0"))
				_ = syscall.Mkfifo(filepath.Join(old, "0"), 0o644)
			})
			return []string{"rollback", "--root", c.root, "--restart-with", "none"}
		}},
		{"rollback restoring a FIFO below a displaced directory", 3, []string{"/etc/demo/web.d/evil is a FIFO"}, func(c *hcase) []string {
			// 1.0.3 replaces the directory web.d with a file: its undo
			// data holds the directory, into which a FIFO is planted.
			if out, code := strata("overlay", "create", "--repo", c.repo, "--version", "1.0.3", "--key", c.b.keyPath, "--add", "/etc/demo/web.d="+filepath.Join(c.b.dir, "web-1.0.1")); code != 0 {
				c.t.Fatalf("overlay create: %s", out)
			}
			if out, code := strata(c.apply("--repo", c.repo)...); code != 0 {
				c.t.Fatalf("apply: %s", out)
			}
			dirs, _ := filepath.Glob(filepath.Join(c.root, manifests.StateDir, "undo", "1.0.3", "old", "*", "gzip.conf"))
			if len(dirs) != 1 {
				c.t.Fatalf("no undo data for web.d: %v", dirs)
			}
			_ = syscall.Mkfifo(filepath.Join(filepath.Dir(dirs[0]), "evil"), 0o644)
			return []string{"rollback", "--root", c.root, "--restart-with", "none"}
		}},
		{"rollback --to with an older step's undo data planted", 3, []string{"rolling back 1.0.1: undo data for /etc/demo/web.conf"}, func(c *hcase) []string {
			// Both steps are checked before the first is taken back: the
			// node is not left half way, at 1.0.1.
			if out, code := strata(c.apply("--repo", c.repo)...); code != 0 {
				c.t.Fatalf("apply: %s", out)
			}
			old := filepath.Join(c.root, manifests.StateDir, "undo", "1.0.1", "old", "0")
			_ = os.Remove(old)
			_ = os.Symlink(filepath.Join(c.canary, "victim"), old)
			return []string{"rollback", "--root", c.root, "--to", "1.0.0", "--restart-with", "none"}
		}},
		{"crash recovery putting back a planted symlink", 3, []string{"rolling back an interrupted apply of 1.0.1", "is a symlink, but the apply displaced a file there"}, func(c *hcase) []string {
			// The state a crash leaves between the switch and the ledger
			// write: 1.0.1's files in the tree, its transaction (journal and
			// displaced objects) in txn/, no ledger record. The displaced
			// web.conf is replaced with a link before recovery runs.
			c.plantUndo(func(old string) {
				state := filepath.Join(c.root, manifests.StateDir)
				_ = os.Rename(filepath.Join(state, "undo", "1.0.1"), filepath.Join(state, "txn"))
				raw, _ := os.ReadFile(filepath.Join(state, "ledger.json"))
				var led manifests.Ledger
				_ = manifests.Decode(raw, &led)
				led.Entries = led.Entries[:len(led.Entries)-1]
				out, _ := manifests.Encode(&led)
				_ = os.WriteFile(filepath.Join(state, "ledger.json"), out, 0o644)
				saved := filepath.Join(state, "txn", "old", "0")
				_ = os.Remove(saved)
				_ = os.Symlink(filepath.Join(c.canary, "victim"), saved)
			})
			return c.apply(c.b.ov1)
		}},
		{"rollback through a symlinked undo directory", 3, []string{"is not a directory (symlink)"}, func(c *hcase) []string {
			c.plantUndo(func(old string) {
				_ = os.Rename(old, filepath.Join(c.canary, "old"))
				_ = os.Symlink(filepath.Join(c.canary, "old"), old)
			})
			return []string{"rollback", "--root", c.root, "--restart-with", "none"}
		}},
		// Key rotation: only a rotation a trusted key signs changes the
		// keys, and it changes nothing else.
		{"rotation signed by an untrusted key", 3, []string{"not valid for any trusted key"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.other, "", edited(c.t, rotateTo(c.t, c.b.other)))))
		}},
		{"rotation that writes another file too", 3, []string{"key rotation 1.0.1", "exactly the 1 key files"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				rotateTo(c.t, c.b.other)(m)
				m.Entries = append([]manifests.Entry{{Path: "etc/demo/web.conf", Type: manifests.TypeFile, Mode: 0o644, Size: 3, SHA256: strings.Repeat("a", 64)}}, m.Entries...)
			}))))
		}},
		{"rotation whose key file is a symlink", 3, []string{"not the key file"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				rotateTo(c.t, c.b.other)(m)
				m.Entries[0] = manifests.Entry{Path: m.Entries[0].Path, Type: manifests.TypeSymlink, Mode: 0o777, Target: c.canary + "/victim"}
			}))))
		}},
		{"rotation key file of another key", 3, []string{"not the key file"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				rotateTo(c.t, c.b.other)(m)
				m.Entries[0].Path = manifests.KeyPath(c.b.key.ID())
			}))))
		}},
		{"rotation that leaves no trusted key", 3, []string{"key rotation 1.0.1 leaves no trusted key"}, func(c *hcase) []string {
			// Signed by the only key, revoking it and adding none, well
			// formed otherwise: key rotate refuses to make it; every
			// reader refuses to follow it.
			ms := c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				rotateTo(c.t, c.b.other)(m)
				m.Keys = &manifests.Rotation{Add: []string{}, Revoke: []string{c.b.key.ID()}}
				m.Entries, m.Deletes = []manifests.Entry{}, []string{manifests.KeyPath(c.b.key.ID())}
				m.TreeDigest = imageTreeWithout(c.t, c.b.image, manifests.KeyPath(c.b.key.ID()))
			}))
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, ms[:2])) // no payload
		}},
		{"key files without a rotation", 3, []string{"only by key rotation"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				rotateTo(c.t, c.b.other)(m)
				m.Keys = nil
			}))))
		}},
		{"index signed by a key a forged rotation adds", 3, []string{"index signature", "key rotations", "not valid for any trusted key"}, func(c *hcase) []string {
			// A rotation the attacker's key signs, after 1.0.2, and an
			// index the attacker's key signs listing it.
			forged := c.write("demo-1.0.3.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov2, c.b.other, "", edited(c.t, func(m *manifests.OverlayManifest) {
				rotateTo(c.t, c.b.other)(m)
				m.Version, m.Parent = "1.0.3", manifests.Ref{Version: "1.0.2", Digest: manifests.Digest(archivetest.Read(c.t, c.b.ov2)[0].Data)}
				m.Lineage = append(m.Lineage, m.Parent)
			})))
			data, _ := os.ReadFile(forged)
			_ = os.WriteFile(filepath.Join(c.repo, "overlays", filepath.Base(forged)), data, 0o644)
			raw, _ := os.ReadFile(filepath.Join(c.repo, repo.IndexFile))
			var x manifests.Index
			_ = manifests.Decode(raw, &x)
			ms := archivetest.Read(c.t, forged)
			sum := sha256.Sum256(data)
			l := &x.Lines[0]
			l.Overlays = append(l.Overlays, manifests.OverlayRef{Version: "1.0.3", File: "overlays/" + filepath.Base(forged), Digest: manifests.Digest(ms[0].Data), SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)), Parent: manifests.Ref{Version: l.Overlays[1].Version, Digest: l.Overlays[1].Digest}})
			x.Serial += 10
			out, _ := manifests.Encode(&x)
			_ = os.WriteFile(filepath.Join(c.repo, repo.IndexFile), out, 0o644)
			_ = os.WriteFile(filepath.Join(c.repo, repo.SigPath(repo.IndexFile)), c.b.other.Sign(out, sign.IndexComment), 0o644)
			return c.apply("--repo", c.repo)
		}},
		// Control characters in paths would forge lines in listings or
		// drive the terminal that shows them.
		{"overlay whose path has an escape sequence", 3, []string{"control character"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Entries[len(m.Entries)-1].Path = "etc/demo/x\x1b]0;pwned\a"
			}))))
		}},
		{"overlay whose restart reason has an escape sequence", 3, []string{"holds a control character"}, func(c *hcase) []string {
			return c.apply(c.write("x.overlay.tar.zst", compress.Zstd, c.resigned(c.b.ov1, c.b.key, "", edited(c.t, func(m *manifests.OverlayManifest) {
				m.Services = []manifests.ServiceAction{{Unit: "demo-web.service", Action: manifests.ActionRestart, Because: []string{"etc/demo/web.conf\x1b[2J"}}}
			}))))
		}},
		{"--add with a right-to-left override in DEST", 2, []string{"control character"}, func(c *hcase) []string {
			return []string{"overlay", "create", "--repo", c.repo, "--version", "1.0.3", "--dry-run", "--add", "/etc/demo/x\u202efnoc.sh=" + filepath.Join(c.b.dir, "web-1.0.1")}
		}},
		{"--add with a newline in DEST", 2, []string{"control character"}, func(c *hcase) []string {
			return []string{"overlay", "create", "--repo", c.repo, "--version", "1.0.3", "--key", c.b.keyPath, "--add", "/etc/demo/evil\n  file    0644 0:0 /etc/demo/harmless=" + filepath.Join(c.b.dir, "web-1.0.1")}
		}},
		{"--restart that is no unit name, even with --allow-unknown-unit", 2, []string{"not a systemd unit name"}, func(c *hcase) []string {
			return []string{"overlay", "create", "--repo", c.repo, "--version", "1.0.3", "--dry-run", "--add", "/etc/motd=" + filepath.Join(c.b.dir, "web-1.0.1"), "--restart", "foo;rm -rf /", "--allow-unknown-unit"}
		}},
		{"key rotate adding a secret key", 2, []string{"--add", "public key"}, func(c *hcase) []string {
			return []string{"key", "rotate", "--repo", c.repo, "--key", c.b.keyPath, "--add", filepath.Join(c.b.dir, "other.key")}
		}},
		{"key rotate revoking the only key", 2, []string{"no key would be left"}, func(c *hcase) []string {
			return []string{"key", "rotate", "--repo", c.repo, "--key", c.b.keyPath, "--revoke", c.b.key.ID()}
		}},
		// A root that is no node is refused alike by every command.
		{"rollback on a directory that is not a node", 3, []string{"not a strata node"}, func(c *hcase) []string {
			return []string{"rollback", "--root", c.canary, "--restart-with", "none"}
		}},
		{"apply on a directory that is not a node", 3, []string{"not a strata node"}, func(c *hcase) []string {
			return []string{"apply-overlay", "--root", c.canary, "--restart-with", "none", c.b.ov1}
		}},
		// Command-line mistakes with hostile values.
		{"hostname with a command", 2, []string{"--hostname", "not allowed"}, func(c *hcase) []string {
			return []string{"provision", "--image", c.b.image, "--disk", filepath.Join(c.canary, "d.img"), "--hostname", "x;reboot"}
		}},
		{"exec template meets a hostile unit", 3, []string{"invalid unit name"}, func(c *hcase) []string {
			// A pending restart planted in the ledger reaches the exec:
			// restarter only if it were valid; it is refused first.
			l := filepath.Join(c.root, manifests.LedgerPath)
			raw, _ := os.ReadFile(l)
			var led manifests.Ledger
			_ = manifests.Decode(raw, &led)
			e := led.Last()
			e.Action, e.Pending = manifests.LedgerRestart, []manifests.ServiceAction{{Unit: "a$(touch " + filepath.Join(c.canary, "pwned") + ").service", Action: manifests.ActionRestart, Because: []string{}}}
			_ = led.Append(e)
			out, _ := manifests.Encode(&led)
			_ = os.WriteFile(l, out, 0o644)
			return []string{"restart-pending", "--root", c.root, "--restart-with", "exec:echo {unit}"}
		}},
	}
	if len(cases) < 60 {
		t.Fatalf("%d cases; the suite promises at least 60", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newHCase(t)
			args := tc.run(c)
			c.refused(tc.code, tc.mention, args...)
		})
	}
}

// rotateTo turns a manifest into a rotation adding key's public half and
// writing its key file, as a forger would.
func rotateTo(t *testing.T, key *sign.Key) func(m *manifests.OverlayManifest) {
	return func(m *manifests.OverlayManifest) {
		pub := key.PublicString()
		text, err := manifests.KeyFile(pub)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(text)
		m.Keys = &manifests.Rotation{Add: []string{pub}, Revoke: []string{}}
		m.Entries = []manifests.Entry{{Path: manifests.KeyPath(key.ID()), Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(text)), SHA256: hex.EncodeToString(sum[:])}}
		m.Deletes, m.Services, m.Unclaimed, m.Catalog = []string{}, []manifests.ServiceAction{}, []string{}, nil
	}
}

// imageTreeWithout is the tree digest of image (a .squashfs beside its
// .image.json) with the entry at path removed: what a well-formed
// overlay deleting path from the image says it gives.
func imageTreeWithout(t *testing.T, image, path string) string {
	t.Helper()
	raw, err := os.ReadFile(strings.TrimSuffix(image, ".squashfs") + ".image.json")
	if err != nil {
		t.Fatal(err)
	}
	var im manifests.ImageManifest
	if err := manifests.Decode(raw, &im); err != nil {
		t.Fatal(err)
	}
	var es []manifests.Entry
	for _, e := range im.Files {
		if e.Path != path {
			es = append(es, e)
		}
	}
	if len(es) != len(im.Files)-1 {
		t.Fatalf("%s has no entry %s", image, path)
	}
	return manifests.TreeDigest(es)
}

// indexAt returns the index of dir as it was at serial s, re-created from
// the current one: the same lines cut to the overlays published by then
// (serial 1: the image; each overlay adds one).
func indexAt(t *testing.T, dir string, s uint64) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, repo.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	var x manifests.Index
	if err := manifests.Decode(raw, &x); err != nil {
		t.Fatal(err)
	}
	x.Serial = s
	x.Lines[0].Overlays = x.Lines[0].Overlays[:s-1]
	x.Lines[0].State = nil // that publication's state file is gone
	out, err := manifests.Encode(&x)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hugeDict rewrites the LZMA2 dictionary byte of the first block header
// of xz stream b to 1.5 GiB and fixes the header's CRC32.
func hugeDict(t *testing.T, b []byte) {
	t.Helper()
	h := b[12:]
	size := (int(h[0]) + 1) * 4
	i := 2
	if h[1]&0x40 != 0 {
		for h[i]&0x80 != 0 {
			i++
		}
		i++
	}
	if h[1]&0x80 != 0 {
		for h[i]&0x80 != 0 {
			i++
		}
		i++
	}
	if h[i] != 0x21 || h[i+1] != 1 {
		t.Fatalf("unexpected xz block header % x", h[:size])
	}
	h[i+2] = 37 // 3 << 29 bytes
	crc := crc32.ChecksumIEEE(h[:size-4])
	h[size-4], h[size-3], h[size-2], h[size-1] = byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24)
}

func mkdev(major, minor uint32) uint64 {
	return uint64(major)<<8 | uint64(minor)
}
