package disk_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/sign"
)

// demoRecipe is the repository's demo recipe, relative to this package.
const demoRecipe = "../../images/demo/recipe.yaml"

func requireTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"mksquashfs", "sqfs2tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (run make deps): %v", tool, err)
		}
	}
}

func testKey(t *testing.T) *sign.Key {
	t.Helper()
	prefix := filepath.Join(t.TempDir(), "build")
	if err := sign.Generate(prefix); err != nil {
		t.Fatal(err)
	}
	k, err := sign.LoadKey(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func buildDemo(t *testing.T, out string, opts ...builder.Option) *builder.Result {
	t.Helper()
	res, err := builder.Build(context.Background(), demoRecipe, out, opts...)
	if err != nil {
		t.Fatalf("building the demo image: %v", err)
	}
	return res
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
