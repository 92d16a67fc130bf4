package testenv

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// SecureBootKey writes a Secure Boot db key (RSA-2048, PKCS#8 PEM) and
// its self-signed certificate (CN "strata test NAME") as dir/NAME.key and
// dir/NAME.crt, as `openssl req -x509 -newkey rsa:2048 -nodes` would.
func SecureBootKey(t testing.TB, dir, name string) (keyPath, certPath string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "strata test " + name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	keyPath = filepath.Join(dir, name+".key")
	certPath = filepath.Join(dir, name+".crt")
	for p, b := range map[string]*pem.Block{keyPath: {Type: "PRIVATE KEY", Bytes: der}, certPath: {Type: "CERTIFICATE", Bytes: cert}} {
		if err := os.WriteFile(p, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return keyPath, certPath
}
