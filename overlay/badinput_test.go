package overlay_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/archive/archivetest"
	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	. "github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// Bad input: every way an overlay can be malformed, forged or hostile must
// be refused with the right sentinel error, a message naming the problem,
// and a node left exactly as it was.

// treeMember returns the member Create would write for a non-file entry.
func treeMember(e manifests.Entry) member {
	return member{Hdr: tree.Header(e, 1700000000)}
}

// hdrMember returns a member with header h and data (h.Size is the
// caller's, so it may disagree with data).
func hdrMember(h *tar.Header, data string) member {
	if h.ModTime.IsZero() {
		h.ModTime = time.Unix(1700000000, 0)
	}
	return member{Hdr: h, Data: []byte(data)}
}

// overlayHead returns the manifest member holding raw and, unless sig is
// nil, the signature member.
func overlayHead(raw, sig []byte) []member {
	mt := time.Unix(1700000000, 0)
	out := []member{{Hdr: &tar.Header{Name: ManifestMember, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(raw)), ModTime: mt}, Data: raw}}
	if sig != nil {
		out = append(out, member{Hdr: &tar.Header{Name: SignatureMember, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(sig)), ModTime: mt}, Data: sig})
	}
	return out
}

// signedOverlayHead encodes m and returns its bytes and head members signed by key.
func signedOverlayHead(tb testing.TB, m *manifests.OverlayManifest, key *sign.Key) ([]byte, []member) {
	tb.Helper()
	raw, err := manifests.Encode(m)
	if err != nil {
		tb.Fatal(err)
	}
	return raw, overlayHead(raw, key.Sign(raw, sign.OverlayComment(m.Line, m.Version)))
}

// memberIndex returns the index of the member called name.
func memberIndex(t *testing.T, ms []member, name string) int {
	t.Helper()
	for i, m := range ms {
		if m.Hdr.Name == name {
			return i
		}
	}
	t.Fatalf("no member %s", name)
	return -1
}

// trustOnly is the trust set holding key's public half.
func trustOnly(t testing.TB, key *sign.Key) *sign.KeySet {
	t.Helper()
	ks, err := key.PublicKeySet()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// untrustedKey generates a key pair the fixture's nodes do not trust.
func untrustedKey(t *testing.T) *sign.Key {
	t.Helper()
	prefix := filepath.Join(t.TempDir(), "other")
	if err := sign.Generate(prefix); err != nil {
		t.Fatal(err)
	}
	k, err := sign.LoadKey(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// wantRefusal fails t unless err matches sentinel and its message, with the
// host paths of scrub taken out (so their digits cannot match), mentions
// every string of mention.
func wantRefusal(t *testing.T, what string, err, sentinel error, scrub []string, mention ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded, want an error matching %q", what, sentinel)
		return
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: error %q does not match %q", what, err, sentinel)
	}
	msg := err.Error()
	for _, p := range scrub {
		msg = strings.ReplaceAll(msg, p, "<path>")
	}
	for _, s := range mention {
		if !strings.Contains(msg, s) {
			t.Errorf("%s: error %q does not mention %q", what, err, s)
		}
	}
}

// badEnv is what a bad-input case builds its overlay with: a fresh fixture
// and node, and a place for checks that run after Apply.
type badEnv struct {
	t     *testing.T
	f     *fixture.Fixture
	root  string
	path  string // where the case writes its overlay
	after []func()
	// mention adds strings, known only once built, that both errors
	// must contain.
	mention []string
}

// base is the valid manifest the crafted cases start from: it continues
// the node's head and writes two files.
func (e *badEnv) base(entries ...manifests.Entry) *manifests.OverlayManifest {
	if entries == nil {
		entries = []manifests.Entry{badConf, badMotd}
	}
	return fixture.HeadManifest(e.t, e.root, "1.0.1", entries, nil)
}

// write signs m with the fixture's key and writes it with members.
func (e *badEnv) write(m *manifests.OverlayManifest, members ...member) string {
	_, head := signedOverlayHead(e.t, m, e.f.Key)
	archivetest.Write(e.t, e.path, compress.Zstd, append(head, members...), false)
	return e.path
}

// writeOpen is write with the last member left unfinished.
func (e *badEnv) writeOpen(m *manifests.OverlayManifest, members ...member) string {
	_, head := signedOverlayHead(e.t, m, e.f.Key)
	archivetest.Write(e.t, e.path, compress.Zstd, append(head, members...), true)
	return e.path
}

const (
	badConfData = "port 81\n"
	badMotdData = "bye\n"
)

var (
	badConf = fixture.ContentEntry("etc/app/app.conf", badConfData)
	badMotd = fixture.ContentEntry("etc/motd", badMotdData)
	// badLong is badConf with 2234 bytes, a size no other number in a message
	// is likely to contain.
	badLongData = strings.Repeat("# padding\n", 223) + "port 81\n"[4:]
	badLong     = fixture.ContentEntry("etc/app/app.conf", badLongData)
)

type badCase struct {
	name string
	// build writes the overlay (to e.path, or elsewhere) and returns its
	// path; it may change the node first (before the fixture.Snapshot).
	build func(e *badEnv) string
	// want is the sentinel Apply's error must match; mention lists strings
	// its message must contain.
	want    error
	mention []string
	// sound marks an overlay that is fine in itself: only the node can
	// refuse it, so ReadArchive must accept it. Otherwise ReadArchive must
	// refuse the same file the way Apply does.
	sound bool
}

func runBadCases(t *testing.T, cases []badCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fixture.New(t)
			e := &badEnv{t: t, f: f, root: f.Provision(), path: filepath.Join(t.TempDir(), "bad.overlay.tar.zst")}
			path := c.build(e)
			// Every temporary directory of the subtest shares this parent.
			scrub := []string{path, e.root, filepath.Dir(filepath.Dir(path))}
			before := fixture.Snap(t, e.root)
			_, err := apply(e.root, path)
			mention := append(append([]string{}, c.mention...), e.mention...)
			wantRefusal(t, "Apply", err, c.want, scrub, mention...)
			fixture.AssertUnchanged(t, e.root, before)
			for _, check := range e.after {
				check()
			}

			fd, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer fd.Close()
			a, err := ReadArchive(fd, trustOnly(t, f.Key))
			switch {
			case !c.sound:
				wantRefusal(t, "ReadArchive", err, c.want, scrub, mention...)
			case err != nil:
				t.Errorf("ReadArchive refused an overlay only the node should refuse: %v", err)
			case a.Manifest == nil:
				t.Errorf("ReadArchive returned no manifest")
			}
		})
	}
}

// TestApplyRefusesBadSignature covers the signature layer: the manifest is
// not trusted unless a trusted key signed exactly its bytes.
func TestApplyRefusesBadSignature(t *testing.T) {
	// A valid signature by a trusted key, made for another document: its
	// trusted comment (which the signature covers) says what it signs.
	otherComment := func(comment string) func(e *badEnv) string {
		return func(e *badEnv) string {
			m := e.base(badConf)
			raw, err := manifests.Encode(m)
			if err != nil {
				e.t.Fatal(err)
			}
			archivetest.Write(e.t, e.path, compress.Zstd, append(overlayHead(raw, e.f.Key.Sign(raw, comment)), fixture.FileMember(badConf, []byte(badConfData))), false)
			return e.path
		}
	}
	runBadCases(t, []badCase{
		{
			name:    "signature made as an index's",
			build:   otherComment(sign.IndexComment),
			want:    sign.ErrBadSignature,
			mention: []string{`"strata index"`, `"strata overlay test-1.0.1"`},
		},
		{
			name:    "signature made for another version",
			build:   otherComment(sign.OverlayComment("test", "1.0.2")),
			want:    sign.ErrBadSignature,
			mention: []string{"test-1.0.2"},
		},
		{
			name:    "signature made for an image manifest",
			build:   otherComment(sign.ImageComment("test", "1.0.1")),
			want:    sign.ErrBadSignature,
			mention: []string{"strata image test-1.0.1"},
		},
		{
			name: "unsigned with payload",
			build: func(e *badEnv) string {
				raw, _ := signedOverlayHead(e.t, e.base(), e.f.Key)
				archivetest.Write(e.t, e.path, compress.Zstd, append(overlayHead(raw, nil), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData))), false)
				return e.path
			},
			want:    sign.ErrUnsigned,
			mention: []string{SignatureMember, "etc/app/app.conf"},
		},
		{
			name: "unsigned manifest only",
			build: func(e *badEnv) string {
				craft(e.t, e.path, e.base(), nil, nil)
				return e.path
			},
			want:    sign.ErrUnsigned,
			mention: []string{SignatureMember},
		},
		{
			name: "empty signature member",
			build: func(e *badEnv) string {
				raw, _ := signedOverlayHead(e.t, e.base(), e.f.Key)
				archivetest.Write(e.t, e.path, compress.Zstd, append(overlayHead(raw, []byte("\n")), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData))), false)
				return e.path
			},
			want: sign.ErrUnsigned,
		},
		{
			name: "signed by an untrusted key",
			build: func(e *badEnv) string {
				other := untrustedKey(e.t)
				e.mention = []string{other.ID(), e.f.Key.ID()}
				craft(e.t, e.path, e.base(), other, []member{fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData))})
				return e.path
			},
			want:    sign.ErrBadSignature,
			mention: []string{"signed by key"},
		},
		{
			name: "garbage signature",
			build: func(e *badEnv) string {
				raw, _ := signedOverlayHead(e.t, e.base(), e.f.Key)
				archivetest.Write(e.t, e.path, compress.Zstd, append(overlayHead(raw, []byte("untrusted comment: x\nnot a signature\n")), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData))), false)
				return e.path
			},
			want:    sign.ErrBadSignature,
			mention: []string{"malformed signature"},
		},
		{
			name: "manifest stored differs from the one signed",
			build: func(e *badEnv) string {
				signed := e.base(badConf)
				stored := e.base(badConf, badMotd)
				raw, err := manifests.Encode(signed)
				if err != nil {
					e.t.Fatal(err)
				}
				stRaw, err := manifests.Encode(stored)
				if err != nil {
					e.t.Fatal(err)
				}
				archivetest.Write(e.t, e.path, compress.Zstd, append(overlayHead(stRaw, e.f.Key.Sign(raw, sign.OverlayComment(signed.Line, signed.Version))), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData))), false)
				e.mention = []string{e.f.Key.ID()}
				return e.path
			},
			want:    sign.ErrBadSignature,
			mention: []string{"changed after it was signed"},
		},
		{
			name: "manifest byte flipped after signing",
			build: func(e *badEnv) string {
				c := e.f.Create("1.0.1", e.f.Change("/etc/app/app.conf", badConfData))
				ms := archivetest.Read(e.t, c.Path)
				i := memberIndex(e.t, ms, ManifestMember)
				e.mention = []string{e.f.Key.ID()}
				// Flip the last hex digit of tree_digest: the manifest
				// still decodes and validates, but is not what was signed.
				raw := ms[i].Data
				at := bytes.Index(raw, []byte(`"tree_digest": "sha256:`)) + len(`"tree_digest": "sha256:`) + 63
				if raw[at] == '0' {
					raw[at] = '1'
				} else {
					raw[at] = '0'
				}
				archivetest.Write(e.t, e.path, compress.Zstd, ms, false)
				return e.path
			},
			want:    sign.ErrBadSignature,
			mention: []string{"changed after it was signed"},
		},
	})
}

// TestApplyRefusesBadManifest covers manifests that are signed but invalid
// in themselves.
func TestApplyRefusesBadManifest(t *testing.T) {
	runBadCases(t, []badCase{
		{
			name: "version equal to parent",
			build: func(e *badEnv) string {
				m := e.base()
				m.Version = m.Parent.Version
				return e.write(m, fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    manifests.ErrVersion,
			mention: []string{"version 1.0.0 is not greater than its parent 1.0.0"},
		},
		{
			name: "version below parent",
			build: func(e *badEnv) string {
				m := e.base()
				m.Version = "0.9.0"
				return e.write(m, fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    manifests.ErrVersion,
			mention: []string{"0.9.0", "1.0.0"},
		},
		{
			name: "version not semver",
			build: func(e *badEnv) string {
				m := e.base()
				m.Version = "v1.0.1"
				return e.write(m, fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    manifests.ErrVersion,
			mention: []string{"v1.0.1"},
		},
		{
			name: "entry path with dot-dot",
			build: func(e *badEnv) string {
				x := fixture.ContentEntry("etc/../etc/x", "x\n")
				return e.write(e.base(x), fixture.FileMember(x, []byte("x\n")))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{"etc/../etc/x"},
		},
		{
			name: "absolute entry path",
			build: func(e *badEnv) string {
				x := fixture.ContentEntry("/etc/x", "x\n")
				return e.write(e.base(x), fixture.FileMember(x, []byte("x\n")))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{"/etc/x"},
		},
		{
			name: "entry in node state",
			build: func(e *badEnv) string {
				x := fixture.ContentEntry(manifests.LedgerPath, "{}\n")
				return e.write(e.base(x), fixture.FileMember(x, []byte("{}\n")))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{manifests.LedgerPath},
		},
		{
			name: "symlink entry out of the root",
			build: func(e *badEnv) string {
				l := manifests.Entry{Path: "etc/evil", Type: manifests.TypeSymlink, Mode: 0o777, Target: "../../../../etc/passwd"}
				return e.write(e.base(l), treeMember(l))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{"etc/evil", "../../../../etc/passwd"},
		},
		{
			name: "device entry type",
			build: func(e *badEnv) string {
				d := manifests.Entry{Path: "etc/null", Type: "chardev", Mode: 0o666}
				return e.write(e.base(d), hdrMember(&tar.Header{Name: "etc/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}, ""))
			},
			want:    manifests.ErrInvalid,
			mention: []string{"etc/null", "chardev"},
		},
		{
			name: "duplicate entry",
			build: func(e *badEnv) string {
				return e.write(e.base(badConf, badConf), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badConf, []byte(badConfData)))
			},
			want:    manifests.ErrInvalid,
			mention: []string{"duplicate", "etc/app/app.conf"},
		},
		{
			name: "duplicate entry with different content",
			build: func(e *badEnv) string {
				other := fixture.ContentEntry(badConf.Path, "port 99\n")
				return e.write(e.base(badConf, other), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(other, []byte("port 99\n")))
			},
			want:    manifests.ErrInvalid,
			mention: []string{"duplicate", "etc/app/app.conf"},
		},
	})
}

// TestApplyRefusesBadPayload covers signed, valid manifests whose payload
// members disagree with them or are hostile.
func TestApplyRefusesBadPayload(t *testing.T) {
	x := fixture.ContentEntry("etc/x", "")
	runBadCases(t, []badCase{
		{
			name: "payload byte flipped",
			build: func(e *badEnv) string {
				c := e.f.Create("1.0.1", e.f.Change("/etc/app/app.conf", badConfData))
				ms := archivetest.Read(e.t, c.Path)
				i := memberIndex(e.t, ms, "etc/app/app.conf")
				ms[i].Data[len(ms[i].Data)-2] ^= 0x01
				archivetest.Write(e.t, e.path, compress.Zstd, ms, false)
				return e.path
			},
			want:    ErrPayload,
			mention: []string{"etc/app/app.conf", "sha256"},
		},
		{
			name: "payload content differs, same size",
			build: func(e *badEnv) string {
				return e.write(e.base(), fixture.FileMember(badConf, []byte("port 82\n")), fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    ErrPayload,
			mention: []string{"etc/app/app.conf", "sha256"},
		},
		{
			name: "second member tampered",
			build: func(e *badEnv) string {
				return e.write(e.base(), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte("byf\n")))
			},
			want:    ErrPayload,
			mention: []string{"etc/motd", "sha256"},
		},
		{
			name: "member name with dot-dot",
			build: func(e *badEnv) string {
				f := fixture.ContentEntry("etc/x", "x\n")
				h := tree.Header(f, 1700000000)
				h.Name = "etc/../etc/x"
				return e.write(e.base(f), hdrMember(h, "x\n"))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{"etc/../etc/x"},
		},
		{
			name: "member name climbing out",
			build: func(e *badEnv) string {
				f := fixture.ContentEntry("etc/x", "x\n")
				h := tree.Header(f, 1700000000)
				h.Name = "../../etc/x"
				return e.write(e.base(f), hdrMember(h, "x\n"))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{"../../etc/x"},
		},
		{
			name: "absolute member name",
			build: func(e *badEnv) string {
				f := fixture.ContentEntry("etc/x", "x\n")
				h := tree.Header(f, 1700000000)
				h.Name = "/etc/x"
				return e.write(e.base(f), hdrMember(h, "x\n"))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{"/etc/x"},
		},
		{
			name: "symlink member out of the root",
			build: func(e *badEnv) string {
				l := manifests.Entry{Path: "etc/evil", Type: manifests.TypeSymlink, Mode: 0o777, Target: "motd"}
				h := tree.Header(l, 1700000000)
				h.Linkname = "../../../../etc/passwd"
				return e.write(e.base(l), hdrMember(h, ""))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{"etc/evil", "../../../../etc/passwd"},
		},
		{
			name: "hardlink member out of the root",
			build: func(e *badEnv) string {
				return e.write(e.base(x), hdrMember(&tar.Header{Name: "etc/x", Typeflag: tar.TypeLink, Linkname: "../../etc/shadow", Mode: 0o644}, ""))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{"etc/x", "../../etc/shadow"},
		},
		{
			name: "hardlink member to an absolute path",
			build: func(e *badEnv) string {
				return e.write(e.base(x), hdrMember(&tar.Header{Name: "etc/x", Typeflag: tar.TypeLink, Linkname: "/etc/shadow", Mode: 0o644}, ""))
			},
			want:    manifests.ErrUnsafePath,
			mention: []string{"etc/x", "/etc/shadow"},
		},
		{
			name: "hardlink member inside the root",
			build: func(e *badEnv) string {
				return e.write(e.base(x), hdrMember(&tar.Header{Name: "etc/x", Typeflag: tar.TypeLink, Linkname: "etc/motd", Mode: 0o644}, ""))
			},
			want:    tree.ErrHardlink,
			mention: []string{"etc/x", "etc/motd"},
		},
		{
			name: "character device member",
			build: func(e *badEnv) string {
				return e.write(e.base(x), hdrMember(&tar.Header{Name: "etc/x", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}, ""))
			},
			want:    tree.ErrSpecialFile,
			mention: []string{"etc/x"},
		},
		{
			name: "block device member",
			build: func(e *badEnv) string {
				return e.write(e.base(x), hdrMember(&tar.Header{Name: "etc/x", Typeflag: tar.TypeBlock, Mode: 0o660, Devmajor: 8}, ""))
			},
			want:    tree.ErrSpecialFile,
			mention: []string{"etc/x"},
		},
		{
			name: "fifo member",
			build: func(e *badEnv) string {
				return e.write(e.base(x), hdrMember(&tar.Header{Name: "etc/x", Typeflag: tar.TypeFifo, Mode: 0o644}, ""))
			},
			want:    tree.ErrSpecialFile,
			mention: []string{"etc/x"},
		},
		{
			name: "member larger than its entry",
			build: func(e *badEnv) string {
				return e.write(e.base(badLong), fixture.FileMember(badLong, []byte(badLongData+strings.Repeat("y", 1111))))
			},
			want:    ErrPayload,
			mention: []string{"etc/app/app.conf", "3345", "2234"},
		},
		{
			name: "member smaller than its entry",
			build: func(e *badEnv) string {
				return e.write(e.base(badLong), fixture.FileMember(badLong, []byte(badLongData[:1117])))
			},
			want:    ErrPayload,
			mention: []string{"etc/app/app.conf", "1117", "2234"},
		},
		{
			name: "member mode differs from its entry",
			build: func(e *badEnv) string {
				h := fixture.FileMember(badConf, []byte(badConfData))
				h.Hdr.Mode = 0o4755
				return e.write(e.base(), h, fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    ErrPayload,
			mention: []string{"etc/app/app.conf", "4755", "0644"},
		},
		{
			name: "decompression bomb: 8 GiB member for a small entry",
			build: func(e *badEnv) string {
				bomb := fixture.FileMember(badLong, []byte(badLongData))
				bomb.Hdr.Size = 8 << 30
				return e.writeOpen(e.base(badLong), bomb)
			},
			want:    tree.ErrLimit,
			mention: []string{"etc/app/app.conf", fmt.Sprint(int64(8 << 30))},
		},
		{
			name: "decompression bomb: 3 GiB member for a small entry",
			build: func(e *badEnv) string {
				bomb := fixture.FileMember(badLong, []byte(badLongData))
				bomb.Hdr.Size = 3 << 30
				return e.writeOpen(e.base(badLong), bomb)
			},
			want:    ErrPayload,
			mention: []string{"etc/app/app.conf", fmt.Sprint(int64(3 << 30)), "2234"},
		},
		{
			name: "entry over the file size limit",
			build: func(e *badEnv) string {
				big := badConf
				big.Size = tree.DefaultLimits.MaxFileSize + 1
				bomb := fixture.FileMember(big, []byte(badConfData))
				bomb.Hdr.Size = big.Size
				return e.writeOpen(e.base(big), bomb)
			},
			want:    tree.ErrLimit,
			mention: []string{"etc/app/app.conf", fmt.Sprint(tree.DefaultLimits.MaxFileSize + 1)},
		},
		{
			name: "same member twice",
			build: func(e *badEnv) string {
				return e.write(e.base(badConf), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badConf, []byte(badConfData)))
			},
			want:    tree.ErrDuplicate,
			mention: []string{"etc/app/app.conf"},
		},
		{
			name: "same member twice instead of the next entry",
			build: func(e *badEnv) string {
				return e.write(e.base(), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badConf, []byte(badConfData)))
			},
			want:    tree.ErrDuplicate,
			mention: []string{"etc/app/app.conf"},
		},
		{
			name: "extra member after the last entry",
			build: func(e *badEnv) string {
				return e.write(e.base(), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData)), fixture.FileMember(fixture.ContentEntry("etc/zzz", "z\n"), []byte("z\n")))
			},
			want:    ErrPayload,
			mention: []string{"etc/zzz"},
		},
		{
			name: "extra member between entries",
			build: func(e *badEnv) string {
				return e.write(e.base(), fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(fixture.ContentEntry("etc/extra", "e\n"), []byte("e\n")), fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    ErrPayload,
			mention: []string{"etc/extra", "etc/motd"},
		},
		{
			name: "missing member",
			build: func(e *badEnv) string {
				return e.write(e.base(), fixture.FileMember(badConf, []byte(badConfData)))
			},
			want:    ErrPayload,
			mention: []string{"etc/motd"},
		},
		{
			name: "no payload at all",
			build: func(e *badEnv) string {
				return e.write(e.base())
			},
			want:    ErrPayload,
			mention: []string{"etc/app/app.conf"},
		},
		{
			name: "members out of order",
			build: func(e *badEnv) string {
				return e.write(e.base(), fixture.FileMember(badMotd, []byte(badMotdData)), fixture.FileMember(badConf, []byte(badConfData)))
			},
			want:    ErrPayload,
			mention: []string{"etc/app/app.conf", "etc/motd"},
		},
		{
			name: "payload before the manifest",
			build: func(e *badEnv) string {
				_, head := signedOverlayHead(e.t, e.base(), e.f.Key)
				archivetest.Write(e.t, e.path, compress.Zstd, append([]member{fixture.FileMember(badConf, []byte(badConfData))}, head...), false)
				return e.path
			},
			want:    ErrFormat,
			mention: []string{ManifestMember, "etc/app/app.conf"},
		},
	})
}

// TestApplyRefusesAtTheNode covers sound overlays the node must refuse:
// wrong place in the line, unmet constraints and writes through symlinks.
func TestApplyRefusesAtTheNode(t *testing.T) {
	runBadCases(t, []badCase{
		{
			name:  "image constraint unmet",
			sound: true,
			build: func(e *badEnv) string {
				m := e.base()
				m.Requires.Image = "^2.0.0"
				return e.write(m, fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    ErrConstraint,
			mention: []string{"^2.0.0", "1.0.0"},
		},
		{
			name:  "tree digest does not follow from the entries",
			sound: true,
			build: func(e *badEnv) string {
				m := e.base()
				m.TreeDigest = manifests.Digest([]byte("some other tree"))
				return e.write(m, fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    ErrPayload,
			mention: []string{manifests.Digest([]byte("some other tree"))},
		},
		{
			name:  "older than the node's head",
			sound: true,
			build: func(e *badEnv) string {
				m := e.base()
				m.Version = "1.0.1-rc.1"
				for _, v := range []string{"1.0.1", "1.0.2"} {
					c := e.f.Create(v, e.f.Change("/etc/motd", v+"\n"))
					if _, err := apply(e.root, c.Path); err != nil {
						e.t.Fatal(err)
					}
				}
				return e.write(m, fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    ErrSequence,
			mention: []string{"1.0.1-rc.1", "1.0.2"},
		},
		{
			name:  "fork of an applied version",
			sound: true,
			build: func(e *badEnv) string {
				m := e.base()
				c := e.f.Create("1.0.1", e.f.Change("/etc/motd", "real\n"))
				if _, err := apply(e.root, c.Path); err != nil {
					e.t.Fatal(err)
				}
				return e.write(m, fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData)))
			},
			want:    ErrSequence,
			mention: []string{"1.0.1", "fork"},
		},
		{
			name:  "skips a version",
			sound: true,
			build: func(e *badEnv) string {
				c := e.f.Create("1.0.1", e.f.Change("/etc/motd", "one\n"))
				e.f.Create("1.0.2", e.f.Change("/etc/motd", "two\n"))
				c3 := e.f.Create("1.0.3", e.f.Change("/etc/motd", "three\n"))
				_ = c
				return c3.Path
			},
			want:    ErrSequence,
			mention: []string{"1.0.3", "1.0.1", "1.0.2"},
		},
		{
			name:  "write through a directory symlinked out of the root",
			sound: true,
			build: func(e *badEnv) string {
				c := e.f.Create("1.0.1", e.f.Change("/etc/app/app.conf", badConfData))
				outside := symlinkOut(e, "etc/app", func(out string) string { return out })
				e.after = append(e.after, func() { assertNothingWritten(e.t, outside) })
				return c.Path
			},
			want:    ErrSymlinkPath,
			mention: []string{"etc/app/app.conf", "etc/app", "leaves the root"},
		},
		{
			name:  "write through a directory symlinked relatively out of the root",
			sound: true,
			build: func(e *badEnv) string {
				c := e.f.Create("1.0.1", e.f.Change("/etc/app/app.conf", badConfData))
				outside := symlinkOut(e, "etc/app", func(out string) string {
					rel, err := filepath.Rel(filepath.Join(e.root, "etc"), out)
					if err != nil {
						e.t.Fatal(err)
					}
					return rel
				})
				e.after = append(e.after, func() { assertNothingWritten(e.t, outside) })
				return c.Path
			},
			want:    ErrSymlinkPath,
			mention: []string{"etc/app/app.conf", "etc/app", "leaves the root"},
		},
		{
			name:  "write through a grandparent symlinked out of the root",
			sound: true,
			build: func(e *badEnv) string {
				c := e.f.Create("1.0.1", e.f.Change("/etc/app/conf.d/a.conf", "b\n"))
				outside := symlinkOut(e, "etc/app", func(out string) string { return out })
				if err := os.Mkdir(filepath.Join(outside, "conf.d"), 0o755); err != nil {
					e.t.Fatal(err)
				}
				e.after = append(e.after, func() { assertNothingWritten(e.t, filepath.Join(outside, "conf.d")) })
				return c.Path
			},
			want:    ErrSymlinkPath,
			mention: []string{"etc/app/conf.d/a.conf", "etc/app", "leaves the root"},
		},
		{
			name:  "delete through a directory symlinked out of the root",
			sound: true,
			build: func(e *badEnv) string {
				c := e.f.Create("1.0.1", Change{Deletes: []string{"/etc/app/conf.d/a.conf"}})
				outside := symlinkOut(e, "etc/app", func(out string) string { return out })
				if err := os.Mkdir(filepath.Join(outside, "conf.d"), 0o755); err != nil {
					e.t.Fatal(err)
				}
				victim := filepath.Join(outside, "conf.d", "a.conf")
				if err := os.WriteFile(victim, []byte("host file\n"), 0o644); err != nil {
					e.t.Fatal(err)
				}
				e.after = append(e.after, func() {
					if b, err := os.ReadFile(victim); err != nil || string(b) != "host file\n" {
						e.t.Errorf("host file outside the root changed: %q, %v", b, err)
					}
				})
				return c.Path
			},
			want:    ErrSymlinkPath,
			mention: []string{"etc/app/conf.d/a.conf", "etc/app", "leaves the root"},
		},
		{
			name: "write through a directory symlink the overlay itself creates",
			build: func(e *badEnv) string {
				outside := e.t.TempDir()
				l := manifests.Entry{Path: "etc/app", Type: manifests.TypeSymlink, Mode: 0o777, Target: outside}
				evil := fixture.ContentEntry("etc/app/evil", "pwned\n")
				e.after = append(e.after, func() { assertNothingWritten(e.t, outside) })
				return e.write(e.base(l, evil), treeMember(l), fixture.FileMember(evil, []byte("pwned\n")))
			},
			// The fold over the node's expected tree refuses it before
			// anything is staged.
			want:    tree.ErrNotDir,
			mention: []string{"etc/app/evil", "etc/app"},
			sound:   true,
		},
	})
}

// symlinkOut replaces the node's directory rel by a symlink to a fresh host
// directory outside the root (the target written as target(dir) gives) and
// returns that directory.
func symlinkOut(e *badEnv, rel string, target func(string) string) string {
	e.t.Helper()
	out := e.t.TempDir()
	p := filepath.Join(e.root, rel)
	if err := os.RemoveAll(p); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Symlink(target(out), p); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func assertNothingWritten(t *testing.T, dir string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		t.Errorf("apply wrote %s outside the node root", filepath.Join(dir, de.Name()))
	}
}

// TestCraftedBaseApplies shows the crafted cases start from an overlay the
// node accepts, so each refusal above is down to the one thing it breaks.
func TestCraftedBaseApplies(t *testing.T) {
	f := fixture.New(t)
	e := &badEnv{t: t, f: f, root: f.Provision(), path: filepath.Join(t.TempDir(), "ok.overlay.tar.zst")}
	m := e.base()
	path := e.write(m, fixture.FileMember(badConf, []byte(badConfData)), fixture.FileMember(badMotd, []byte(badMotdData)))
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := ReadArchive(fd, trustOnly(t, f.Key)); err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	if _, err := apply(e.root, path); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for p, want := range map[string]string{"etc/app/app.conf": badConfData, "etc/motd": badMotdData} {
		if b, err := os.ReadFile(filepath.Join(e.root, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	a, err := nodetest.Verify(context.Background(), e.root, node.VerifyOptions{Files: true})
	if err != nil || !a.OK() {
		t.Fatalf("verify: %v %+v", err, a)
	}
	if a.TreeDigest != m.TreeDigest {
		t.Errorf("node tree %s, want the crafted manifest's %s", a.TreeDigest, m.TreeDigest)
	}
}

// truncCut is one place to cut an archive.
type truncCut struct {
	name string
	at   int
	want error
}

// memberSpan is where one member's header and data lie in an uncompressed
// archive.
type memberSpan struct {
	name             string
	header, data, to int
}

// tarSpans locates the members of an uncompressed tar.
func tarSpans(t *testing.T, b []byte) []memberSpan {
	t.Helper()
	r := bytes.NewReader(b)
	tr := tar.NewReader(r)
	var out []memberSpan
	prevEnd := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data := len(b) - r.Len()
		// The header starts at the first block boundary after the
		// previous member's data.
		start := (prevEnd + 511) &^ 511
		out = append(out, memberSpan{name: h.Name, header: start, data: data, to: data + int(h.Size)})
		prevEnd = data + int(h.Size)
		if _, err := io.Copy(io.Discard, tr); err != nil {
			t.Fatal(err)
		}
	}
}

// TestApplyRefusesTruncatedArchive cuts valid overlays at many offsets:
// every cut is refused as not an overlay (in the head) or as a payload
// that does not match its manifest (after it), and the node is unchanged.
func TestApplyRefusesTruncatedArchive(t *testing.T) {
	f := fixture.New(t)
	big := make([]byte, 300<<10) // incompressible: several zstd blocks
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	ch := Change{Adds: []Add{
		{Dest: "/etc/app/app.conf", Src: f.HostFile(badConfData)},
		{Dest: "/usr/share/doc/big", Src: f.HostFile(string(big))},
	}}
	zst := f.Create("1.0.1", ch)
	// The same overlay uncompressed, from a second fixture so it also
	// continues a fresh node.
	f2 := fixture.New(t)
	ch.Adds[0].Src, ch.Adds[1].Src = f2.HostFile(badConfData), f2.HostFile(string(big))
	plain, err := Create(t.Context(), f2.Repo, f2.Key, ch, CreateOptions{Version: "1.0.1", Compression: "none"})
	if err != nil {
		t.Fatal(err)
	}
	zb, err := os.ReadFile(zst.Path)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := os.ReadFile(plain.Path)
	if err != nil {
		t.Fatal(err)
	}

	// Compressed: the cut may land anywhere in the decompressed stream, so
	// either sentinel is right, but one of them must be there.
	zcuts := []truncCut{
		{"empty", 0, nil}, {"1 byte", 1, nil}, {"3 bytes", 3, nil}, {"magic only", 4, nil},
		{"5 bytes", 5, nil}, {"12 bytes", 12, nil}, {"100 bytes", 100, nil},
		{"an eighth", len(zb) / 8, nil}, {"a quarter", len(zb) / 4, nil}, {"half", len(zb) / 2, nil},
		{"three quarters", 3 * len(zb) / 4, nil},
		{"all but 100 bytes", len(zb) - 100, nil}, {"all but 5 bytes", len(zb) - 5, nil}, {"all but 1 byte", len(zb) - 1, nil},
	}
	// Uncompressed: the cut's place is known exactly.
	sp := tarSpans(t, pb)
	if len(sp) < 4 || sp[0].name != ManifestMember || sp[1].name != SignatureMember {
		t.Fatalf("unexpected layout %+v", sp)
	}
	var cuts []truncCut
	cuts = append(cuts,
		truncCut{"empty", 0, ErrFormat},
		truncCut{"inside the manifest header", 100, ErrFormat},
		truncCut{"at the manifest data", sp[0].data, ErrFormat},
		truncCut{"inside the manifest data", (sp[0].data + sp[0].to) / 2, ErrFormat},
		truncCut{"inside the signature header", sp[1].header + 100, ErrFormat},
		truncCut{"inside the signature data", (sp[1].data + sp[1].to) / 2, ErrFormat},
	)
	for _, s := range sp[2:] {
		cuts = append(cuts,
			truncCut{"at the header of " + s.name, s.header, ErrPayload},
			truncCut{"inside the header of " + s.name, s.header + 100, ErrPayload},
			truncCut{"inside the data of " + s.name, (s.data + s.to) / 2, ErrPayload},
			truncCut{"at the end of the data of " + s.name, s.to, ErrPayload},
		)
		if s.to%512 != 0 {
			cuts = append(cuts, truncCut{"inside the padding of " + s.name, s.to + 1, ErrPayload})
		}
	}
	for _, c := range cuts {
		if s := sp[len(sp)-1]; c.at >= s.to {
			continue // a cut after the last member's data loses nothing
		}
		t.Run("none/"+c.name, func(t *testing.T) { checkTruncated(t, f2, pb[:c.at], c.want) })
	}
	for _, c := range zcuts {
		t.Run("zstd/"+c.name, func(t *testing.T) { checkTruncated(t, f, zb[:c.at], c.want) })
	}
}

// checkTruncated applies a truncated archive to a fresh node and checks
// the refusal; a nil want accepts ErrFormat or ErrPayload.
func checkTruncated(t *testing.T, f *fixture.Fixture, b []byte, want error) {
	t.Helper()
	root := f.Provision()
	path := filepath.Join(t.TempDir(), "cut.overlay.tar")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("cut at %d", len(b))
	before := fixture.Snap(t, root)
	_, err := apply(root, path)
	fixture.AssertUnchanged(t, root, before)
	_, rerr := ReadArchive(bytes.NewReader(b), trustOnly(t, f.Key))
	for _, got := range []struct {
		what string
		err  error
	}{{"Apply", err}, {"ReadArchive", rerr}} {
		switch {
		case got.err == nil:
			t.Errorf("%s accepted an archive cut at %d", got.what, len(b))
		case want != nil && !errors.Is(got.err, want):
			t.Errorf("%s: error %q does not match %q", got.what, got.err, want)
		case want == nil && !errors.Is(got.err, ErrFormat) && !errors.Is(got.err, ErrPayload):
			t.Errorf("%s: error %q matches neither %q nor %q", got.what, got.err, ErrFormat, ErrPayload)
		}
	}
}
