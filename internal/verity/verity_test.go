package verity_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/verity"
)

// pattern is deterministic data of n 4 KiB blocks, every block different.
func pattern(n int) []byte {
	b := make([]byte, n*verity.BlockSize)
	for i := range b {
		b[i] = byte((i*7 + i/verity.BlockSize) % 251)
	}
	return b
}

func params(blocks int64, salt []byte) verity.Params {
	return verity.Params{DataBlockSize: verity.BlockSize, HashBlockSize: verity.BlockSize, DataBlocks: blocks, Salt: salt}
}

// TestKnownAnswer pins the tree of 129 blocks (two levels) to what
// `veritysetup format --no-superblock --salt=73747261746121` wrote for
// the same data: its root hash and the SHA-256 of its hash file.
func TestKnownAnswer(t *testing.T) {
	salt, _ := hex.DecodeString("73747261746121")
	data := pattern(129)
	tr, err := verity.Compute(context.Background(), bytes.NewReader(data), params(129, salt))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tr.RootHex(), "e57a08cf43d46cbf7f341ddcf3b5358506f2a1ccea27b85e17b874a94dbe1073"; got != want {
		t.Errorf("root hash %s, veritysetup's %s", got, want)
	}
	if got, want := hex.EncodeToString(sha256Sum(tr.Hash)), "8489e7a01667cfc2f3653c29bca405a0b79171653b6539d65a7f3aed0636af3e"; got != want {
		t.Errorf("hash tree sha256 %s, veritysetup's %s", got, want)
	}
	if got := int64(len(tr.Hash)); got != 3*verity.BlockSize || got != tr.Params.TreeSize() {
		t.Errorf("tree of %d bytes, TreeSize %d, want 3 blocks", got, tr.Params.TreeSize())
	}
}

func sha256Sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

// appended writes data with its tree appended to a file (Append) and
// returns the file and the tree.
func appended(t *testing.T, data, salt []byte) (string, *verity.Tree) {
	t.Helper()
	return appendedHashing(t, data, salt, nil)
}

// appendedHashing is appended through AppendHashing with whole.
func appendedHashing(t *testing.T, data, salt []byte, whole io.Writer) (string, *verity.Tree) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := verity.AppendHashing(context.Background(), f, salt, whole)
	if err != nil {
		t.Fatal(err)
	}
	return p, tr
}

func TestAppendPadsAndVerifies(t *testing.T) {
	data := pattern(3)[:2*verity.BlockSize+100] // not block aligned
	p, tr := appended(t, data, []byte("salt"))
	if tr.Params.DataBlocks != 3 || tr.Params.HashOffset != 3*verity.BlockSize {
		t.Fatalf("params %+v, want 3 data blocks and the tree at block 3", tr.Params)
	}
	fi, _ := os.Stat(p)
	if fi.Size() != 4*verity.BlockSize {
		t.Errorf("file of %d bytes, want data padded to 3 blocks and one hash block", fi.Size())
	}
	if err := verifyFile(p, tr); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyRefuses changes one thing at a time and wants the error to
// name it.
func TestVerifyRefuses(t *testing.T) {
	const blocks = 200 // two levels
	salt := []byte("0123456789abcdef0123456789abcdef")
	p, tr := appended(t, pattern(blocks), salt)
	good, _ := os.ReadFile(p)
	ctx := context.Background()
	cases := []struct {
		name string
		edit func(b []byte) []byte
		par  func(verity.Params) verity.Params
		root func([]byte) []byte
		want string
	}{
		{name: "data byte", edit: func(b []byte) []byte { b[150*verity.BlockSize+7] ^= 1; return b }, want: "data block 150 "},
		{name: "level 0 hash block", edit: func(b []byte) []byte { b[tr.Params.HashOffset+verity.BlockSize+40] ^= 1; return b }, want: "hash block 0 of level 0"},
		{name: "top hash block", edit: func(b []byte) []byte { b[tr.Params.HashOffset+3] ^= 1; return b }, want: "top hash block"},
		{name: "hash padding", edit: func(b []byte) []byte { b[len(b)-1] = 1; return b }, want: "hash block 1 of level 0"},
		{name: "truncated tree", edit: func(b []byte) []byte { return b[:len(b)-1] }, want: "cut short"},
		{name: "no tree", edit: func(b []byte) []byte { return b[:tr.Params.HashOffset] }, want: "cut short: 0 of"},
		{name: "wrong salt", par: func(q verity.Params) verity.Params { q.Salt = []byte("other"); return q }, want: "top hash block"},
		{name: "no salt", par: func(q verity.Params) verity.Params { q.Salt = nil; return q }, want: "top hash block"},
		{name: "wrong root", root: func(r []byte) []byte { r = bytes.Clone(r); r[0] ^= 0x80; return r }, want: "wrong root hash"},
		{name: "short root", root: func(r []byte) []byte { return r[:20] }, want: "root hash of 20 bytes"},
		{name: "more data blocks", par: func(q verity.Params) verity.Params { q.DataBlocks = blocks * 200; return q }, want: "cut short"},
		{name: "odd block size", par: func(q verity.Params) verity.Params { q.DataBlockSize = 3000; return q }, want: "power of two"},
		{name: "unaligned offset", par: func(q verity.Params) verity.Params { q.HashOffset++; return q }, want: "not a multiple"},
		{name: "long salt", par: func(q verity.Params) verity.Params { q.Salt = make([]byte, 257); return q }, want: "salt of 257 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bytes.Clone(good)
			if c.edit != nil {
				b = c.edit(b)
			}
			q, r := tr.Params, tr.Root
			if c.par != nil {
				q = c.par(q)
			}
			if c.root != nil {
				r = c.root(r)
			}
			err := verity.Verify(ctx, bytes.NewReader(b), bytes.NewReader(b), q, r)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Verify = %v, want an error naming %q", err, c.want)
			}
			if !errors.Is(err, verity.ErrCorrupt) && !errors.Is(err, verity.ErrParams) {
				t.Errorf("error %v is neither ErrCorrupt nor ErrParams", err)
			}
		})
	}
	if err := verity.Verify(ctx, bytes.NewReader(good), bytes.NewReader(good), tr.Params, tr.Root); err != nil {
		t.Fatalf("the untouched file: %v", err)
	}
}

func TestSingleBlock(t *testing.T) {
	data := pattern(1)
	tr, err := verity.Compute(context.Background(), bytes.NewReader(data), params(1, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Hash) != 0 || !bytes.Equal(tr.Root, sha256Sum(data)) {
		t.Fatalf("one block: tree of %d bytes, root %x; want no tree and the block's own digest", len(tr.Hash), tr.Root)
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := verity.Compute(ctx, bytes.NewReader(pattern(2000)), params(2000, nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Compute after cancel = %v", err)
	}
}

// TestAgainstVeritysetup has veritysetup format the same data with the
// same parameters, for sizes around every level boundary, and compares
// root hash and tree byte for byte; then veritysetup verify accepts the
// file Append wrote and refuses it with one byte changed.
func TestAgainstVeritysetup(t *testing.T) {
	testenv.RequireTools(t, []string{"veritysetup"})
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		blocks int
		salt   int
		hashBS int
	}{{2, 0, 4096}, {128, 32, 4096}, {129, 32, 4096}, {16384, 7, 4096}, {16385, 256, 4096}, {300, 32, 1024}} {
		t.Run(strconv.Itoa(c.blocks)+"-"+strconv.Itoa(c.hashBS), func(t *testing.T) {
			dir := t.TempDir()
			data := make([]byte, c.blocks*verity.BlockSize)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			salt := make([]byte, c.salt)
			for i := range salt {
				salt[i] = byte(rng.Uint32())
			}
			saltArg := "-"
			if len(salt) > 0 {
				saltArg = hex.EncodeToString(salt)
			}
			dp, hp := filepath.Join(dir, "data"), filepath.Join(dir, "hash")
			if err := os.WriteFile(dp, data, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("veritysetup", "format", dp, hp, "--no-superblock", "--salt="+saltArg,
				"--hash-block-size="+strconv.Itoa(c.hashBS)).CombinedOutput()
			if err != nil {
				t.Fatalf("veritysetup format: %v\n%s", err, out)
			}
			theirs := rootOf(t, out)
			q := params(int64(c.blocks), salt)
			q.HashBlockSize = c.hashBS
			tr, err := verity.Compute(context.Background(), bytes.NewReader(data), q)
			if err != nil {
				t.Fatal(err)
			}
			if tr.RootHex() != theirs {
				t.Fatalf("root hash %s, veritysetup's %s", tr.RootHex(), theirs)
			}
			hash, _ := os.ReadFile(hp)
			if !bytes.Equal(hash, tr.Hash) {
				t.Fatalf("tree differs from veritysetup's (%d vs %d bytes)", len(tr.Hash), len(hash))
			}
			if c.hashBS != verity.BlockSize {
				return
			}
			img, at := appended(t, data, salt)
			args := []string{"verify", img, img, at.RootHex(), "--no-superblock", "--salt=" + saltArg,
				"--hash-offset=" + strconv.FormatInt(at.Params.HashOffset, 10), "--data-blocks=" + strconv.FormatInt(at.Params.DataBlocks, 10)}
			if out, err := exec.Command("veritysetup", args...).CombinedOutput(); err != nil {
				t.Fatalf("veritysetup verify of the appended file: %v\n%s", err, out)
			}
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0xff ^ data[len(data)-1]}, int64(len(data)-1)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if out, err := exec.Command("veritysetup", args...).CombinedOutput(); err == nil {
				t.Fatalf("veritysetup verify accepted a changed last block:\n%s", out)
			}
			if err := verifyFile(img, at); !errors.Is(err, verity.ErrCorrupt) {
				t.Fatalf("VerifyFile of a changed last block = %v", err)
			}
		})
	}
}

func rootOf(t testing.TB, out []byte) string {
	t.Helper()
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "Root hash" {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no root hash in veritysetup's output:\n%s", out)
	return ""
}

func verifyFile(p string, tr *verity.Tree) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return verity.VerifyFile(context.Background(), f, tr.Params, tr.Root)
}

// TestVerifyFileChecksSizeFirst: parameters that claim far more data than
// the file holds are refused from the file's size, before a digest of it
// is allocated (2^24 blocks would take 512 MiB); more than MaxDataBlocks
// is refused outright.
func TestVerifyFileChecksSizeFirst(t *testing.T) {
	p, tr := appended(t, pattern(2), nil)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q := tr.Params
	q.DataBlocks, q.HashOffset = verity.MaxDataBlocks, verity.MaxDataBlocks*verity.BlockSize
	if err := verity.VerifyFile(context.Background(), f, q, tr.Root); !errors.Is(err, verity.ErrCorrupt) || !strings.Contains(err.Error(), "the file has 12288 bytes") {
		t.Fatalf("VerifyFile with 2^24 claimed blocks = %v", err)
	}
	q.DataBlocks++
	if err := verity.VerifyFile(context.Background(), f, q, tr.Root); !errors.Is(err, verity.ErrParams) {
		t.Fatalf("VerifyFile with more than MaxDataBlocks = %v", err)
	}
}

// TestMatchesRoot: the top hash block of a tree matches its root hash;
// another salt, another root, a changed top block or a tree cut before
// it do not; a changed data block or lower hash block still matches
// (MatchesRoot only finds a device, the kernel checks it).
func TestMatchesRoot(t *testing.T) {
	const blocks = 200 // two levels: the top block is not the first level 0 block
	p, tr := appended(t, pattern(blocks), []byte("salt"))
	good, _ := os.ReadFile(p)
	other := bytes.Clone(tr.Root)
	other[5] ^= 1
	cases := []struct {
		name string
		b    []byte
		par  func(verity.Params) verity.Params
		root []byte
		want bool
	}{
		{name: "its root", b: good, root: tr.Root, want: true},
		{name: "data changed", b: func() []byte { b := bytes.Clone(good); b[9] ^= 1; return b }(), root: tr.Root, want: true},
		{name: "level 0 changed", b: func() []byte { b := bytes.Clone(good); b[tr.Params.HashOffset+verity.BlockSize] ^= 1; return b }(), root: tr.Root, want: true},
		{name: "top changed", b: func() []byte { b := bytes.Clone(good); b[tr.Params.HashOffset+1] ^= 1; return b }(), root: tr.Root},
		{name: "another root", b: good, root: other},
		{name: "another salt", b: good, root: tr.Root, par: func(q verity.Params) verity.Params { q.Salt = []byte("pepper"); return q }},
		{name: "cut before the top", b: good[:tr.Params.HashOffset+100], root: tr.Root},
		{name: "no tree", b: good[:tr.Params.HashOffset], root: tr.Root},
	}
	for _, c := range cases {
		q := tr.Params
		if c.par != nil {
			q = c.par(q)
		}
		got, err := verity.MatchesRoot(bytes.NewReader(c.b), q, c.root)
		if err != nil || got != c.want {
			t.Errorf("%s: MatchesRoot = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	one := pattern(1)
	q := params(1, nil)
	if got, err := verity.MatchesRoot(bytes.NewReader(one), q, sha256Sum(one)); err != nil || !got {
		t.Errorf("one data block: MatchesRoot = %v, %v; want its own digest to match", got, err)
	}
	q.DataBlockSize = 3000
	if _, err := verity.MatchesRoot(bytes.NewReader(good), q, tr.Root); !errors.Is(err, verity.ErrParams) {
		t.Errorf("odd block size: %v, want ErrParams", err)
	}
}

// AppendHashing writes the same tree as Append and hands its writer the
// whole file as it ends up, data and tree, in order: the file's SHA-256
// without a second read. Sizes from one block (no tree) to several
// chunks, more than the reader's buffers, so buffers are reused.
func TestAppendHashing(t *testing.T) {
	salt := []byte("salt")
	for _, blocks := range []int{1, 3, 257, 2100} {
		data := pattern(blocks)[:blocks*verity.BlockSize-7] // padded by Append
		want, wantTree := appended(t, data, salt)
		h := sha256.New()
		p, tr := appendedHashing(t, data, salt, h)
		got, _ := os.ReadFile(p)
		wantBytes, _ := os.ReadFile(want)
		if !bytes.Equal(got, wantBytes) || tr.RootHex() != wantTree.RootHex() {
			t.Errorf("%d blocks: AppendHashing wrote another file or root than Append", blocks)
		}
		if sum := h.Sum(nil); !bytes.Equal(sum, sha256Sum(got)) {
			t.Errorf("%d blocks: whole-file digest %x, the file's is %x", blocks, sum, sha256Sum(got))
		}
	}
}

// A writer that fails, or a cancelled context, ends AppendHashing with
// that error (the ordered reader does not wait for buffers forever).
func TestAppendHashingErrors(t *testing.T) {
	file := func() *os.File {
		p := filepath.Join(t.TempDir(), "img")
		if err := os.WriteFile(p, pattern(3000), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	broken := errors.New("disk gone")
	if _, err := verity.AppendHashing(context.Background(), file(), nil, &failAfter{n: 3 << 20, err: broken}); !errors.Is(err, broken) {
		t.Errorf("failing writer: %v, want its error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := verity.AppendHashing(ctx, file(), nil, sha256.New()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}

// failAfter accepts n bytes, then fails with err.
type failAfter struct {
	n   int
	err error
}

func (w *failAfter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, w.err
	}
	w.n -= len(p)
	return len(p), nil
}
