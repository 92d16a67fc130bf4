package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/overlay"
)

func newKeyCmd(g *globals) *cobra.Command {
	key := &cobra.Command{Use: "key", Short: "Manage minisign signing keys"}
	var out string
	gen := &cobra.Command{
		Use:     "generate --out PREFIX",
		Example: `  strata key generate --out ci        # ci.key (secret), ci.pub`,
		Short:   "Write a new key pair to PREFIX.key and PREFIX.pub (minisign format, no password)",
		Args:    args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := sign.Generate(out); err != nil {
				return err
			}
			k, err := sign.LoadKey(out + ".key")
			if err != nil {
				return err
			}
			res := map[string]string{"key": out + ".key", "pub": out + ".pub", "id": k.ID()}
			return g.output(c.OutOrStdout(), res, func(w io.Writer) {
				fmt.Fprintf(w, "wrote %s.key and %s.pub (key id %s)\n", out, out, k.ID())
			})
		},
	}
	gen.Flags().StringVar(&out, "out", "", "path prefix of the key files")
	required(gen, "out")
	key.AddCommand(gen, newKeyRotateCmd(g))
	return key
}

func newKeyRotateCmd(g *globals) *cobra.Command {
	var repoDir, keyPath, indexKeyPath string
	var adds []string
	var o overlay.RotateOptions
	c := &cobra.Command{
		Use: "rotate --repo REPO --key CURRENT (--add NEW.pub ... | --revoke KEYID ...) [--index-key K]",
		Example: `  strata key rotate --repo repo --key old.key --add new.pub
  strata key rotate --repo repo --key new.key --revoke 0033A74F42697927`,
		Short: "Publish a key rotation: the next overlay of the line, which changes the keys nodes trust",
		Long: `Publish a key rotation. It is the next overlay of the line, signed by
--key (a key the line trusts at its head), and changes nothing but the
trusted keys: --add trusts a public key, --revoke stops trusting a key id.
Nodes apply it in sequence like any overlay; after it, they refuse overlays
signed by a revoked key, and a node that missed it catches up in order.

The index is signed from now on by --index-key (default --key), which must
be trusted after the rotation: revoking --key needs the new key's secret
half here. See docs/security.md for the compromise procedure.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := overlayVersion("--version", o.Version); err != nil {
				return err
			}
			if len(adds) == 0 && len(o.Revoke) == 0 {
				return usageError{fmt.Errorf("nothing to do: give --add NEW.pub or --revoke KEYID")}
			}
			for _, p := range adds {
				if _, err := sign.LoadPublicFile(p); errors.Is(err, sign.ErrSecretKey) {
					return usageError{fmt.Errorf("--add %s: %w", p, err)}
				}
				b, err := safefile.Read(p, sign.MaxPublicKeySize)
				if err != nil {
					return usageError{fmt.Errorf("--add: %w", err)}
				}
				o.Add = append(o.Add, b)
			}
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			if o.IndexKey, err = loadKey(indexKeyPath); err != nil {
				return err
			}
			res, err := overlay.RotateKeys(c.Context(), repoDir, key, o)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), map[string]any{"path": res.Path, "digest": res.Digest, "manifest": res.Manifest}, func(w io.Writer) {
				fmt.Fprintf(w, "wrote %s\n", res.Path)
				printManifest(w, res.Manifest, res.Digest)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&repoDir, "repo", "", "repository")
	f.StringVar(&keyPath, "key", "", "signing key the line trusts at its head")
	f.StringArrayVar(&adds, "add", nil, "public key file (.pub) to trust")
	f.StringArrayVar(&o.Revoke, "revoke", nil, "id of a key to stop trusting")
	f.StringVar(&indexKeyPath, "index-key", "", "key that signs the index from now on (default --key)")
	versionVar(c, &o.Version, "version", "version of the rotation overlay (default: the head's next patch)")
	f.StringVar(&o.Line, "line", "", "line (when the repository has several)")
	required(c, "repo", "key")
	return c
}

// loadKey loads --key when set.
func loadKey(path string) (*sign.Key, error) {
	if path == "" {
		return nil, nil
	}
	k, err := sign.LoadKey(path)
	return k, keyUsage(err)
}
