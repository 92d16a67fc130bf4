package disk_test

import (
	"context"
	"github.com/strata-dev/strata/internal/secureboot"
	"os"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
)

// demoRecipe is the repository's demo recipe, relative to this package.
const demoRecipe = "../../images/demo/recipe.yaml"

func testKey(t *testing.T) *sign.Key { return testenv.Key(t) }

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

// sbSigner is a Secure Boot db key and certificate made in dir, loaded.
func sbSigner(t *testing.T, dir, name string) *secureboot.Signer {
	t.Helper()
	k, c := testenv.SecureBootKey(t, dir, name)
	s, err := secureboot.LoadSigner(k, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
