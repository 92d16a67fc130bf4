package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/archive/archivetest"
	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// These tests need no squashfs tools: archives are made member by member.

const content = "port 81\n"

func overlay() (*manifests.OverlayManifest, archivetest.Member) {
	sum := sha256.Sum256([]byte(content))
	e := manifests.Entry{Path: "etc/app.conf", Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}
	parent := manifests.Ref{Version: "1.0.0", Digest: manifests.Digest([]byte("image"))}
	m := &manifests.OverlayManifest{
		Schema: manifests.Schema, Kind: manifests.KindOverlay, Line: "demo", Version: "1.0.1",
		Parent: parent, Lineage: []manifests.Ref{parent}, Requires: manifests.Requires{Image: "^1.0.0"},
		Entries: []manifests.Entry{e}, Deletes: []string{}, Services: []manifests.ServiceAction{},
		TreeDigest: manifests.Digest([]byte("tree")), Created: "2026-01-02T00:00:00Z",
	}
	return m, archivetest.Member{Hdr: tree.Header(e, 1700000000), Data: []byte(content)}
}

func trust(t *testing.T, k *sign.Key) *sign.KeySet {
	t.Helper()
	ks, err := k.PublicKeySet()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestOpenAndPayload(t *testing.T) {
	key, other := testenv.Key(t), testenv.Key(t)
	m, file := overlay()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.overlay.tar.zst")
	archivetest.Craft(t, good, m, key, []archivetest.Member{file})

	a, err := archive.Open(good, trust(t, key))
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	err = a.Payload(context.Background(), nil, func(e manifests.Entry, r io.Reader) error {
		got, err = io.ReadAll(r)
		return err
	})
	if err != nil || string(got) != content {
		t.Fatalf("payload: %q, %v", got, err)
	}

	// Refused before the payload is trusted: another key, no signature,
	// the manifest not first.
	if _, err := archive.Open(good, trust(t, other)); !errors.Is(err, sign.ErrBadSignature) {
		t.Errorf("signed by a key not trusted: %v, want ErrBadSignature", err)
	}
	unsigned := filepath.Join(dir, "unsigned.overlay.tar.zst")
	archivetest.Craft(t, unsigned, m, nil, []archivetest.Member{file})
	if _, err := archive.Open(unsigned, trust(t, key)); !errors.Is(err, sign.ErrUnsigned) {
		t.Errorf("unsigned: %v, want ErrUnsigned", err)
	}
	ms := archivetest.Read(t, good)
	swapped := filepath.Join(dir, "swapped.overlay.tar.zst")
	archivetest.Write(t, swapped, compress.Zstd, []archivetest.Member{ms[2], ms[0], ms[1]}, false)
	if _, err := archive.Open(swapped, trust(t, key)); !errors.Is(err, archive.ErrFormat) {
		t.Errorf("payload before the manifest: %v, want ErrFormat", err)
	}

	// Refused while streaming: content that is not the manifest's, and a
	// member the manifest does not list.
	for name, tail := range map[string][]archivetest.Member{
		"altered content": {{Hdr: file.Hdr, Data: []byte("port 99\n")}},
		"extra member":    {file, {Hdr: &tar.Header{Name: "etc/extra", Mode: 0o644, Typeflag: tar.TypeReg}, Data: []byte("x")}},
		"missing member":  {},
	} {
		p := filepath.Join(dir, "bad.overlay.tar.zst")
		archivetest.Pack(t, p, compress.Zstd, append([]archivetest.Member{ms[0], ms[1]}, tail...))
		a, err := archive.Open(p, trust(t, key))
		if err != nil {
			t.Fatalf("%s: open: %v (the head is good)", name, err)
		}
		err = a.Payload(context.Background(), nil, func(manifests.Entry, io.Reader) error { return nil })
		if !errors.Is(err, archive.ErrPayload) && !errors.Is(err, archive.ErrFormat) {
			t.Errorf("%s: %v, want ErrPayload or ErrFormat", name, err)
		}
	}

	// ReadArchive verifies the whole stream in one pass.
	raw := archivetest.Write(t, "", compress.Zstd, ms, false)
	if _, err := archive.ReadArchive(bytes.NewReader(raw), trust(t, key)); err != nil {
		t.Errorf("ReadArchive of a good overlay: %v", err)
	}
	raw = archivetest.Pack(t, "", compress.Zstd, []archivetest.Member{ms[0], ms[1], {Hdr: file.Hdr, Data: []byte("port 99\n")}})
	if _, err := archive.ReadArchive(bytes.NewReader(raw), trust(t, key)); err == nil {
		t.Error("ReadArchive took altered content")
	}
}
