package tree_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// memPayload streams entries with contents from a map, counting calls.
func memPayload(entries []manifests.Entry, contents map[string]string, calls *int) tree.Payload {
	return func(ctx context.Context, _ tree.Bases, fn func(manifests.Entry, io.Reader) error) error {
		*calls++
		for _, e := range entries {
			var r io.Reader
			if e.Type == manifests.TypeFile {
				r = strings.NewReader(contents[e.Path])
			}
			if err := fn(e, r); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestFoldStateIsLazyAndCached(t *testing.T) {
	base := baseState().Entries()
	l1 := tree.Layer{Name: "overlay 1", Entries: []manifests.Entry{fileE("etc/app/a.conf", "a2")}, Deletes: []string{"etc/app/conf.d"}}
	l2 := tree.Layer{Name: "overlay 2", Entries: []manifests.Entry{dirE("etc/app/conf.d"), fileE("etc/app/conf.d/y", "y")}}
	f1 := tree.Append(tree.Base(base), l1)
	f2 := tree.Append(f1, l2)
	if got := len(f2.Layers()); got != 2 {
		t.Fatalf("layers: %d", got)
	}
	want, err := baseState().Apply(l1.Entries, l1.Deletes)
	if err == nil {
		want, err = want.Apply(l2.Entries, l2.Deletes)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := f2.State()
	if err != nil || got.Digest() != want.Digest() {
		t.Fatalf("fold: %v, digest %s, want %s", err, got.Digest(), want.Digest())
	}
	if again, _ := f2.State(); again.Digest() != got.Digest() {
		t.Fatal("second State differs")
	}
	// Appending to f1 again does not disturb f2.
	f3 := tree.Append(f1, tree.Layer{Name: "overlay 3", Deletes: []string{"etc/nope"}})
	_, err = f3.State()
	var le *tree.LayerError
	if !errors.As(err, &le) || le.Layer != "overlay 3" || !errors.Is(err, tree.ErrNotExist) {
		t.Fatalf("bad layer: %v, want a LayerError for overlay 3 wrapping ErrNotExist", err)
	}
	if len(f2.Layers()) != 2 || f2.Layers()[1].Name != "overlay 2" {
		t.Fatal("f2 changed by an append to f1")
	}
}

func TestFoldWriteTarStreamsEachPayloadOnce(t *testing.T) {
	base := baseState().Entries()
	baseContent := map[string]string{"etc/app/a.conf": "a", "etc/app/conf.d/x": "x", "etc/motd": "hi"}
	var baseTar bytes.Buffer
	if err := tree.WriteTar(&baseTar, base, memOpener(baseContent), 0); err != nil {
		t.Fatal(err)
	}
	c1 := map[string]string{"etc/app/a.conf": "a2", "etc/b": "b"}
	c2 := map[string]string{"etc/b": "b2"}
	e1 := []manifests.Entry{fileE("etc/app/a.conf", "a2"), fileE("etc/b", "b")}
	e2 := []manifests.Entry{fileE("etc/b", "b2"), linkE("etc/l", "b")}
	var n1, n2 int
	f := tree.Append(tree.Base(base),
		tree.Layer{Name: "overlay 1", Entries: e1, Payload: memPayload(e1, c1, &n1)},
		tree.Layer{Name: "overlay 2", Entries: e2, Payload: memPayload(e2, c2, &n2)})
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	if err := f.WriteTar(context.Background(), tw, tree.NewReader(&baseTar, tree.Limits{}), 0); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if n1 != 1 || n2 != 1 {
		t.Fatalf("payloads streamed %d and %d times, want once each", n1, n2)
	}
	entries, contents, err := readAll(t, &out, tree.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := f.State()
	if got := tree.NewState(entries); got.Digest() != want.Digest() {
		t.Fatalf("stream gives tree %v, fold says %v", keys(got), keys(want))
	}
	if contents["etc/b"] != "b2" || contents["etc/app/a.conf"] != "a2" || contents["etc/app/conf.d/x"] != "x" {
		t.Fatalf("contents: %v", contents)
	}
	// Without the base stream, the base's files have no content.
	if err := f.WriteTar(context.Background(), tar.NewWriter(io.Discard), nil, 0); err == nil {
		t.Fatal("WriteTar without a base stream succeeded")
	}
}
