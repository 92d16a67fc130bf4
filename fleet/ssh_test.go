package fleet

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// sshServer is an in-process SSH server on loopback: it accepts one
// client key and answers each exec request with handle's output.
type sshServer struct {
	addr    string
	hostKey ssh.PublicKey
	mu      sync.Mutex
	cmds    []string
}

// exec is a reply to one command: stdout, stderr and exit status.
type reply struct {
	stdout, stderr string
	status         uint32
}

func newSSHServer(t testing.TB, client ssh.PublicKey, handle func(cmd string, stdin []byte) reply, extraHostKeys ...ssh.Signer) *sshServer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) != string(client.Marshal()) {
			return nil, errors.New("unknown key")
		}
		return nil, nil
	}}
	for _, k := range extraHostKeys {
		cfg.AddHostKey(k)
	}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &sshServer{addr: ln.Addr().String(), hostKey: signer.PublicKey()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c, cfg, handle)
		}
	}()
	return s
}

func (s *sshServer) serve(c net.Conn, cfg *ssh.ServerConfig, handle func(string, []byte) reply) {
	defer c.Close()
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, in, err := nc.Accept()
		if err != nil {
			return
		}
		go func() {
			defer ch.Close()
			for req := range in {
				if req.Type != "exec" {
					req.Reply(false, nil)
					continue
				}
				n := binary.BigEndian.Uint32(req.Payload)
				cmd := string(req.Payload[4 : 4+n])
				req.Reply(true, nil)
				s.mu.Lock()
				s.cmds = append(s.cmds, cmd)
				s.mu.Unlock()
				var stdin []byte
				if strings.Contains(cmd, "'-'") {
					buf := make([]byte, 1<<16)
					for {
						k, err := ch.Read(buf)
						stdin = append(stdin, buf[:k]...)
						if err != nil {
							break
						}
					}
				}
				r := handle(cmd, stdin)
				ch.Write([]byte(r.stdout))
				ch.Stderr().Write([]byte(r.stderr))
				ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, r.status))
				return
			}
		}()
	}
}

// clientKey writes a new identity file and returns its path and key.
func clientKey(t testing.TB, dir string) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "id")
	if err := os.WriteFile(p, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return p, k
}

func knownHosts(t testing.TB, dir, addr string, k ssh.PublicKey) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	p := filepath.Join(dir, "known_hosts")
	line := fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(k))
	if err := os.WriteFile(p, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSSHRunQuotesAndBounds(t *testing.T) {
	dir := t.TempDir()
	id, pub := clientKey(t, dir)
	srv := newSSHServer(t, pub, func(cmd string, stdin []byte) reply {
		switch {
		case strings.Contains(cmd, "big"):
			return reply{stdout: strings.Repeat("x", maxStdout+10)}
		case strings.Contains(cmd, "fail"):
			return reply{stderr: `{"error":"overlay 1.0.1 taken back","exit_code":5}` + "\n", status: 5}
		case strings.Contains(cmd, "'-'"):
			return reply{stdout: fmt.Sprintf("got %d bytes", len(stdin))}
		}
		return reply{stdout: "ok"}
	})
	s := &SSH{KnownHosts: knownHosts(t, dir, srv.addr, srv.hostKey), Identities: []string{id}, Timeout: 5 * time.Second}
	ctx := context.Background()
	se, err := s.dial(ctx, Node{Name: "n", Address: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer se.Close()
	hostile := "1.0.1'; touch /tmp/pwned; echo '"
	if out, err := se.run(ctx, nil, "/usr/bin/strata", "apply-overlay", "--through", hostile); err != nil || string(out) != "ok" {
		t.Fatalf("run: %q, %v", out, err)
	}
	if got, want := srv.cmds[0], `'/usr/bin/strata' 'apply-overlay' '--through' '1.0.1'\''; touch /tmp/pwned; echo '\'''`; got != want {
		t.Errorf("the server got %s, want %s", got, want)
	}
	if out, err := se.run(ctx, strings.NewReader(strings.Repeat("b", 100000)), "strata", "--bundle", "-"); err != nil || string(out) != "got 100000 bytes" {
		t.Errorf("stdin: %q, %v", out, err)
	}
	if _, err := se.run(ctx, nil, "strata", "big"); err == nil || !strings.Contains(err.Error(), "printed more than") {
		t.Errorf("an endless answer: %v", err)
	}
	var ee *ExitError
	if _, err := se.run(ctx, nil, "strata", "fail"); !errors.As(err, &ee) || ee.Code != 5 || !strings.Contains(err.Error(), "taken back") {
		t.Errorf("a failing command: %v", err)
	}
}

// Host keys are checked, never learned: an unknown host and a changed
// key are refused.
func TestSSHHostKeys(t *testing.T) {
	dir := t.TempDir()
	id, pub := clientKey(t, dir)
	srv := newSSHServer(t, pub, func(string, []byte) reply { return reply{stdout: "ok"} })
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	otherKey, _ := ssh.NewPublicKey(other)
	for name, kh := range map[string]string{
		"key mismatch": knownHosts(t, dir, srv.addr, otherKey),
		"key is unknown": func() string {
			p := filepath.Join(dir, "empty")
			os.WriteFile(p, nil, 0o600)
			return p
		}(),
	} {
		s := &SSH{KnownHosts: kh, Identities: []string{id}, Timeout: 5 * time.Second}
		_, err := s.dial(context.Background(), Node{Name: "n", Address: srv.addr})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
		if raw, _ := os.ReadFile(kh); strings.Contains(string(raw), string(ssh.MarshalAuthorizedKey(srv.hostKey))) {
			t.Errorf("%s: the host key was learned", name)
		}
	}
}

// A host that accepts the connection and then says nothing does not hold
// the caller past the timeout; nor does a wrong identity get in.
func TestSSHSilentHostAndBadIdentity(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	id, pub := clientKey(t, dir)
	s := &SSH{KnownHosts: knownHosts(t, dir, ln.Addr().String(), pub), Identities: []string{id}, Timeout: 300 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, err := s.dial(context.Background(), Node{Name: "n", Address: ln.Addr().String()})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "handshake") {
			t.Errorf("a silent host: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("dialing a silent host did not give up")
	}
	// A key the server does not accept.
	srv := newSSHServer(t, pub, func(string, []byte) reply { return reply{} })
	dir2 := t.TempDir()
	id2, _ := clientKey(t, dir2)
	s2 := &SSH{KnownHosts: knownHosts(t, dir2, srv.addr, srv.hostKey), Identities: []string{id2}, Timeout: 5 * time.Second}
	if _, err := s2.dial(context.Background(), Node{Name: "n", Address: srv.addr}); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Errorf("an identity the host does not accept: %v", err)
	}
	// Identity files that are not keys are named.
	bad := filepath.Join(dir2, "bad")
	os.WriteFile(bad, []byte("nonsense"), 0o600)
	if err := (&SSH{KnownHosts: knownHosts(t, dir2, srv.addr, srv.hostKey), Identities: []string{bad}}).Prepare(); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a bad identity file: %v", err)
	}
}

// Fleet status reads nodes without a health URL over SSH (strata health),
// with the clock skew from the document's time; a node that answers junk
// is unreachable with the reason.
func TestStatusOverSSH(t *testing.T) {
	dir := t.TempDir()
	id, pub := clientKey(t, dir)
	srv := newSSHServer(t, pub, func(cmd string, _ []byte) reply {
		if cmd != `'/usr/bin/strata' 'health' '--root' '/'` {
			return reply{stderr: "unexpected " + cmd, status: 2}
		}
		now := time.Now().Add(90 * time.Second).UTC().Format(time.RFC3339Nano)
		return reply{stdout: `{"line":"l","head":{"version":"1.0.1","digest":"sha256:aa"},"now":"` + now + `"}`}
	})
	junk := newSSHServer(t, pub, func(string, []byte) reply { return reply{stdout: "<html>"} })
	kh := filepath.Join(dir, "kh")
	var lines []string
	for _, s := range []*sshServer{srv, junk} {
		host, port, _ := net.SplitHostPort(s.addr)
		lines = append(lines, fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(s.hostKey)))
	}
	if err := os.WriteFile(kh, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &SSH{KnownHosts: kh, Identities: []string{id}}
	rep := Status(context.Background(), []Node{{Name: "good", Address: srv.addr}, {Name: "junk", Address: junk.addr}}, StatusOptions{SSH: s})
	good, bad := rep.Nodes[0], rep.Nodes[1]
	if good.State != StateCurrent || good.Head != "1.0.1" || good.Skew < 85*time.Second || good.Skew > 95*time.Second {
		t.Errorf("good: %+v", good)
	}
	if bad.State != StateUnreachable || !strings.Contains(bad.Error, "not a strata health document") {
		t.Errorf("junk: %+v", bad)
	}
}

// A host with several host keys, of which known_hosts records only its
// ed25519 one (as OpenSSH does), is reached: the client asks for the
// types it knows.
func TestSSHHostWithSeveralKeys(t *testing.T) {
	dir := t.TempDir()
	id, pub := clientKey(t, dir)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecSigner, err := ssh.NewSignerFromKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	srv := newSSHServer(t, pub, func(string, []byte) reply { return reply{stdout: "ok"} }, ecSigner)
	s := &SSH{KnownHosts: knownHosts(t, dir, srv.addr, srv.hostKey), Identities: []string{id}, Timeout: 5 * time.Second}
	se, err := s.dial(context.Background(), Node{Name: "n", Address: srv.addr})
	if err != nil {
		t.Fatalf("a host with an ECDSA key too: %v", err)
	}
	se.Close()
}
