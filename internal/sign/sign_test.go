package sign_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

func newKey(t *testing.T, dir, name string) (*sign.Key, string) {
	t.Helper()
	prefix := filepath.Join(dir, name)
	if err := sign.Generate(prefix); err != nil {
		t.Fatal(err)
	}
	k, err := sign.LoadKey(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	return k, prefix + ".pub"
}

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "k")
	if err := sign.Generate(prefix); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v, want 0600", fi.Mode().Perm())
	}
	pub, err := os.ReadFile(prefix + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(pub, []byte("untrusted comment:")) || !bytes.HasSuffix(pub, []byte("\n")) {
		t.Errorf("public key file is not in minisign form:\n%s", pub)
	}
	k, err := sign.LoadKey(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k.PublicText(), pub) {
		t.Errorf("key's public half\n%s\ndiffers from the .pub file\n%s", k.PublicText(), pub)
	}
	if len(k.ID()) != 16 || strings.ToUpper(k.ID()) != k.ID() {
		t.Errorf("ID() = %q, want 16 upper-case hex digits", k.ID())
	}

	// Generating again refuses to overwrite either file.
	keyBefore, _ := os.ReadFile(prefix + ".key")
	if err := sign.Generate(prefix); err == nil {
		t.Fatal("Generate overwrote an existing key pair")
	}
	keyAfter, _ := os.ReadFile(prefix + ".key")
	pubAfter, _ := os.ReadFile(prefix + ".pub")
	if !bytes.Equal(keyBefore, keyAfter) || !bytes.Equal(pub, pubAfter) {
		t.Fatal("failed Generate changed the existing key files")
	}
	// Only the .pub existing is refused too.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other+".pub", []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sign.Generate(other); err == nil {
		t.Fatal("Generate overwrote an existing .pub file")
	}
	if b, _ := os.ReadFile(other + ".pub"); string(b) != "keep" {
		t.Fatalf("existing .pub was changed to %q", b)
	}
	// Two generated keys differ.
	k2, _ := newKey(t, dir, "k2")
	if k2.ID() == k.ID() || k2.PublicString() == k.PublicString() {
		t.Fatal("two generated keys are the same")
	}
}

func TestSignVerify(t *testing.T) {
	dir := t.TempDir()
	k, pubPath := newKey(t, dir, "k")
	msg := []byte("{\"kind\":\"image\"}\n")
	sig := k.Sign(msg, "demo-1.0.0.image.json")
	if !bytes.Contains(sig, []byte("trusted comment: demo-1.0.0.image.json")) {
		t.Errorf("signature lacks the trusted comment:\n%s", sig)
	}

	for name, load := range map[string]func() (*sign.KeySet, error){
		"PublicKeySet":   k.PublicKeySet,
		"LoadPublicFile": func() (*sign.KeySet, error) { return sign.LoadPublicFile(pubPath) },
		"NewKeySet .pub": func() (*sign.KeySet, error) { return sign.NewKeySet(k.PublicText()) },
		"NewKeySet b64":  func() (*sign.KeySet, error) { return sign.NewKeySet([]byte(k.PublicString())) },
	} {
		ks, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		id, err := ks.Verify(msg, sig)
		if err != nil || id != k.ID() {
			t.Errorf("%s: Verify = %q, %v; want %s", name, id, err, k.ID())
		}
	}

	ks, _ := k.PublicKeySet()
	// Any change to the message is caught.
	for _, m := range [][]byte{append([]byte{}, msg[:len(msg)-1]...), append(append([]byte{}, msg...), ' '), bytes.ToUpper(msg), nil} {
		if _, err := ks.Verify(m, sig); !errors.Is(err, sign.ErrBadSignature) || !strings.Contains(err.Error(), "changed after it was signed") {
			t.Errorf("Verify of altered message %q = %v, want ErrBadSignature saying it changed", m, err)
		}
	}
	// A changed trusted comment is caught.
	forged := bytes.Replace(sig, []byte("demo-1.0.0.image.json"), []byte("demo-9.9.9.image.json"), 1)
	if _, err := ks.Verify(msg, forged); !errors.Is(err, sign.ErrBadSignature) {
		t.Errorf("Verify with altered trusted comment = %v, want ErrBadSignature", err)
	}
	// Garbage signatures.
	if _, err := ks.Verify(msg, []byte("not a signature")); !errors.Is(err, sign.ErrBadSignature) {
		t.Errorf("Verify of garbage = %v, want ErrBadSignature", err)
	}
}

func TestVerifyWrongKey(t *testing.T) {
	dir := t.TempDir()
	signer, _ := newKey(t, dir, "signer")
	other, _ := newKey(t, dir, "other")
	third, _ := newKey(t, dir, "third")
	msg := []byte("index")
	sig := signer.Sign(msg, "index.json")
	ks, err := sign.NewKeySet(other.PublicText(), third.PublicText())
	if err != nil {
		t.Fatal(err)
	}
	_, err = ks.Verify(msg, sig)
	if !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("Verify with the wrong keys = %v, want ErrBadSignature", err)
	}
	for _, id := range []string{signer.ID(), other.ID(), third.ID()} {
		if !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "not trusted") {
			t.Errorf("error %q does not name key %s or say it is not trusted", err, id)
		}
	}
	// Adding the right key makes it verify.
	if err := ks.Merge(signer.PublicKeySet()); err != nil {
		t.Fatal(err)
	}
	if id, err := ks.Verify(msg, sig); err != nil || id != signer.ID() {
		t.Fatalf("Verify after adding the signer = %q, %v", id, err)
	}
}

func TestVerifyUnsignedAndNoKeys(t *testing.T) {
	dir := t.TempDir()
	k, _ := newKey(t, dir, "k")
	ks, _ := k.PublicKeySet()
	for _, sig := range [][]byte{nil, {}, []byte("  \n\t")} {
		if _, err := ks.Verify([]byte("m"), sig); !errors.Is(err, sign.ErrUnsigned) {
			t.Errorf("Verify(sig %q) = %v, want ErrUnsigned", sig, err)
		}
	}
	sig := k.Sign([]byte("m"), "m")
	if _, err := (&sign.KeySet{}).Verify([]byte("m"), sig); !errors.Is(err, sign.ErrNoKeys) {
		t.Errorf("Verify with an empty set = %v, want ErrNoKeys", err)
	}
	var nilSet *sign.KeySet
	if _, err := nilSet.Verify([]byte("m"), sig); !errors.Is(err, sign.ErrNoKeys) {
		t.Errorf("Verify with a nil set = %v, want ErrNoKeys", err)
	}
}

func TestMinisignCLIVerifiesStrataSignature(t *testing.T) {
	bin, err := exec.LookPath("minisign")
	if err != nil {
		t.Fatalf("minisign is required: %v", err)
	}
	dir := t.TempDir()
	k, pubPath := newKey(t, dir, "k")
	msgPath := filepath.Join(dir, "demo-1.0.0.image.json")
	msg := []byte("{\n  \"schema\": 1\n}\n")
	if err := os.WriteFile(msgPath, msg, 0o644); err != nil {
		t.Fatal(err)
	}
	sigPath := msgPath + ".minisig"
	if err := os.WriteFile(sigPath, k.Sign(msg, "demo-1.0.0.image.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-Vm", msgPath, "-p", pubPath, "-x", sigPath).CombinedOutput()
	if err != nil {
		t.Fatalf("minisign -V failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "demo-1.0.0.image.json") {
		t.Errorf("minisign did not show the trusted comment:\n%s", out)
	}
	// The CLI refuses the same signature over altered content.
	if err := os.WriteFile(msgPath, append(msg, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-Vm", msgPath, "-p", pubPath, "-x", sigPath).CombinedOutput(); err == nil {
		t.Fatalf("minisign accepted a signature over altered content:\n%s", out)
	}
	// And strata verifies what the minisign CLI signs with a strata key.
	if err := os.WriteFile(msgPath, msg, 0o644); err != nil {
		t.Fatal(err)
	}
	cliSig := filepath.Join(dir, "cli.minisig")
	cmd := exec.Command(bin, "-S", "-s", filepath.Join(dir, "k.key"), "-m", msgPath, "-x", cliSig, "-t", "from cli")
	cmd.Stdin = strings.NewReader("\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("minisign -S with a strata key failed: %v\n%s", err, out)
	}
	b, err := os.ReadFile(cliSig)
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := k.PublicKeySet()
	if id, err := ks.Verify(msg, b); err != nil || id != k.ID() {
		t.Fatalf("Verify of a minisign CLI signature = %q, %v", id, err)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.Mkdir(keys, 0o755); err != nil {
		t.Fatal(err)
	}
	a, _ := newKey(t, keys, "a")
	b, _ := newKey(t, keys, "b")
	// A duplicate of a under another name counts once.
	if err := os.WriteFile(filepath.Join(keys, "a-copy.pub"), a.PublicText(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Files that are not *.pub are ignored, private keys included.
	if err := os.WriteFile(filepath.Join(keys, "README"), []byte("not a key"), 0o644); err != nil {
		t.Fatal(err)
	}
	ks, err := sign.LoadDir(keys)
	if err != nil {
		t.Fatal(err)
	}
	if ks.Len() != 2 {
		t.Fatalf("LoadDir found %d keys, want 2", ks.Len())
	}
	want := []string{a.PublicString(), b.PublicString()}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	if got := ks.Strings(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Strings() = %v, want %v", got, want)
	}
	files := ks.Files()
	if len(files) != 2 || !bytes.Equal(files[a.ID()+".pub"], a.PublicText()) || !bytes.Equal(files[b.ID()+".pub"], b.PublicText()) {
		t.Fatalf("Files() = %v", files)
	}
	for _, k := range []*sign.Key{a, b} {
		if _, err := ks.Verify([]byte("x"), k.Sign([]byte("x"), "x")); err != nil {
			t.Errorf("key %s from LoadDir does not verify: %v", k.ID(), err)
		}
	}
	only, _ := a.PublicKeySet()
	if !ks.Contains(only) || only.Contains(ks) {
		t.Fatal("Contains is wrong")
	}

	// An empty or missing directory gives an empty set.
	empty, err := sign.LoadDir(t.TempDir())
	if err != nil || empty.Len() != 0 {
		t.Fatalf("LoadDir(empty) = %v, %v", empty, err)
	}
	if _, err := empty.Verify([]byte("x"), a.Sign([]byte("x"), "x")); !errors.Is(err, sign.ErrNoKeys) {
		t.Fatalf("Verify with keys from an empty dir = %v, want ErrNoKeys", err)
	}
	// A malformed .pub file is an error naming it.
	if err := os.WriteFile(filepath.Join(keys, "bad.pub"), []byte("untrusted comment: x\nnot base64!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sign.LoadDir(keys); err == nil || !strings.Contains(err.Error(), "bad.pub") {
		t.Fatalf("LoadDir with a malformed key = %v", err)
	}
}

func TestAnyKey(t *testing.T) {
	dir := t.TempDir()
	k, _ := newKey(t, dir, "k")
	sig := k.Sign([]byte("msg"), "msg")
	ks := sign.AnyKey()
	// It accepts a well-formed signature without checking it...
	id, err := ks.Verify([]byte("other message"), sig)
	if err != nil || id != k.ID() {
		t.Fatalf("AnyKey Verify = %q, %v; want %s", id, err, k.ID())
	}
	// ...but not a missing or malformed one.
	if _, err := ks.Verify([]byte("msg"), nil); !errors.Is(err, sign.ErrUnsigned) {
		t.Fatalf("AnyKey with no signature = %v, want ErrUnsigned", err)
	}
	if _, err := ks.Verify([]byte("msg"), []byte("garbage")); !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("AnyKey with garbage = %v, want ErrBadSignature", err)
	}
	if ks.Len() != 0 {
		t.Fatalf("AnyKey().Len() = %d", ks.Len())
	}
}

func TestLoadKeyEncrypted(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (scrypt at the real cost takes seconds): make test runs it")
	}
	bin, err := exec.LookPath("minisign")
	if err != nil {
		t.Fatalf("minisign is required: %v", err)
	}
	dir := t.TempDir()
	sec, pub := filepath.Join(dir, "enc.key"), filepath.Join(dir, "enc.pub")
	cmd := exec.Command(bin, "-G", "-s", sec, "-p", pub)
	cmd.Stdin = strings.NewReader("pw\npw\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("minisign -G: %v\n%s", err, out)
	}
	t.Setenv("STRATA_KEY_PASSWORD", "") // restored after the test
	os.Unsetenv("STRATA_KEY_PASSWORD")
	if _, err := sign.LoadKey(sec); err == nil || !strings.Contains(err.Error(), "STRATA_KEY_PASSWORD") {
		t.Fatalf("LoadKey of an encrypted key without a password = %v", err)
	}
	t.Setenv("STRATA_KEY_PASSWORD", "pw")
	k, err := sign.LoadKey(sec)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := sign.LoadPublicFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Verify([]byte("x"), k.Sign([]byte("x"), "x")); err != nil {
		t.Fatalf("encrypted key's signature: %v", err)
	}
	if _, err := sign.LoadKey(filepath.Join(dir, "missing.key")); err == nil {
		t.Fatal("LoadKey of a missing file succeeded")
	}
}

// The key files a node keeps are the text manifests.KeyFile gives, which
// rotation overlays are checked against.
func TestKeyFilesMatchManifests(t *testing.T) {
	for i := 0; i < 20; i++ {
		dir := t.TempDir()
		if err := sign.Generate(filepath.Join(dir, "k")); err != nil {
			t.Fatal(err)
		}
		ks, err := sign.LoadPublicFile(filepath.Join(dir, "k.pub"))
		if err != nil {
			t.Fatal(err)
		}
		pub := ks.Strings()[0]
		id, _ := manifests.KeyID(pub)
		want, err := manifests.KeyFile(pub)
		if err != nil {
			t.Fatal(err)
		}
		if got := ks.Files()[id+".pub"]; string(got) != string(want) {
			t.Fatalf("Files() = %q, manifests.KeyFile = %q", got, want)
		}
		if disk, _ := os.ReadFile(filepath.Join(dir, "k.pub")); string(disk) != string(want) {
			t.Fatalf("generated .pub = %q, manifests.KeyFile = %q", disk, want)
		}
	}
}

func TestKeySetAfter(t *testing.T) {
	dir := t.TempDir()
	a, _ := newKey(t, dir, "a")
	b, _ := newKey(t, dir, "b")
	ks, _ := a.PublicKeySet()
	m := &manifests.OverlayManifest{Version: "1.0.1"}
	if got, _ := ks.After(m); got != ks {
		t.Errorf("an overlay that is no rotation changed the keys")
	}
	m.Keys = &manifests.Rotation{Add: []string{b.PublicString()}, Revoke: []string{a.ID()}}
	got, err := ks.After(m)
	if err != nil {
		t.Fatal(err)
	}
	if ids := got.IDs(); len(ids) != 1 || ids[0] != b.ID() {
		t.Errorf("after the rotation: %v, want only %s", ids, b.ID())
	}
	if !ks.Has(a.ID()) || ks.Has(b.ID()) {
		t.Errorf("After changed the set it was called on")
	}
	msg := []byte("x")
	if _, err := got.Verify(msg, a.Sign(msg, "c")); err == nil {
		t.Errorf("the revoked key still verifies")
	}
}

// A rotation after which nothing is trusted (it revokes the only key and
// adds none) is refused by every reader: key rotate never makes one, but
// a hand-made one would leave a node trusting no repository (issue 25).
func TestKeySetAfterRefusesEmptyTrust(t *testing.T) {
	a, _ := newKey(t, t.TempDir(), "a")
	ks, _ := a.PublicKeySet()
	m := &manifests.OverlayManifest{Version: "1.0.1", Keys: &manifests.Rotation{Add: []string{}, Revoke: []string{a.ID()}}}
	if _, err := ks.After(m); !errors.Is(err, manifests.ErrInvalid) || !strings.Contains(err.Error(), "leaves no trusted key") {
		t.Fatalf("After revoking the only key: %v, want ErrInvalid saying no key is left", err)
	}
}

// A rotation adding a key whose id names another trusted key is refused:
// key files are named by id, so on nodes it would replace the other one.
func TestKeySetAfterRefusesIDCollision(t *testing.T) {
	a, _ := newKey(t, t.TempDir(), "a")
	ks, _ := a.PublicKeySet()
	b, err := base64.StdEncoding.DecodeString(a.PublicString())
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff // same id, another key
	twin := base64.StdEncoding.EncodeToString(b)
	m := &manifests.OverlayManifest{Version: "1.0.1", Keys: &manifests.Rotation{Add: []string{twin}}}
	if _, err := ks.After(m); !errors.Is(err, sign.ErrBadSignature) || !strings.Contains(err.Error(), a.ID()) {
		t.Fatalf("After with a key of a trusted id: %v, want a refusal naming %s", err, a.ID())
	}
	if ks.HasKey(a) != true {
		t.Fatal("HasKey of the set's own key")
	}
	other, _ := newKey(t, t.TempDir(), "o")
	if ks.HasKey(other) {
		t.Fatal("HasKey of another key")
	}
}

// An auditor's keys: its own and the history keys together, but no trust
// of its own stays nil (the repository's keys), whatever history holds.
func TestWithHistory(t *testing.T) {
	dir := t.TempDir()
	_, a := newKey(t, dir, "a")
	_, b := newKey(t, dir, "b")
	trust, err := sign.LoadPublicFile(a)
	if err != nil {
		t.Fatal(err)
	}
	history, err := sign.LoadPublicFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if sign.WithHistory(nil, history) != nil {
		t.Error("no trust of the auditor's own became the history keys")
	}
	if got := sign.WithHistory(trust, nil); got != trust {
		t.Error("trust without history changed")
	}
	both := sign.WithHistory(trust, history)
	if len(both.IDs()) != 2 || len(trust.IDs()) != 1 {
		t.Errorf("union %v (trust %v): want both keys, trust itself unchanged", both.IDs(), trust.IDs())
	}
}
