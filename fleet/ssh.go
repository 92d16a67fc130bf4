package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/strata-dev/strata/internal/safefile"
)

// SSH is how fleet operations reach nodes over SSH: host keys are checked
// against a known_hosts file (an unknown or changed key is refused, never
// learned), and the client authenticates with the keys of a running
// ssh-agent ($SSH_AUTH_SOCK) and of the identity files.
type SSH struct {
	// KnownHosts is the known_hosts file (default ~/.ssh/known_hosts).
	KnownHosts string
	// Identities are private key files (default: whichever of
	// ~/.ssh/id_ed25519, id_ecdsa and id_rsa exist). Keys protected by
	// a passphrase must be loaded into ssh-agent instead.
	Identities []string
	// User is the login for nodes whose inventory entry names none
	// (default root).
	User string
	// Timeout bounds connecting and the SSH handshake (default 10s).
	Timeout time.Duration
	// Strata is the strata program on the nodes (default
	// /usr/bin/strata, where images put it).
	Strata string

	mu     sync.Mutex // guards Prepare
	config *ssh.ClientConfig
	agent  net.Conn
}

// Close releases the connection to ssh-agent, if Prepare made one.
func (s *SSH) Close() error {
	if s.agent == nil {
		return nil
	}
	return s.agent.Close()
}

// maxOutput bounds what a remote command may print.
const (
	maxStdout = 64 << 20
	maxStderr = 1 << 20
)

// Prepare reads the known_hosts file and the identities once; the
// operations call it themselves.
func (s *SSH) Prepare() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.config != nil {
		return nil
	}
	home, _ := os.UserHomeDir()
	if s.KnownHosts == "" {
		s.KnownHosts = filepath.Join(home, ".ssh", "known_hosts")
	}
	if s.User == "" {
		s.User = "root"
	}
	if s.Timeout <= 0 {
		s.Timeout = 10 * time.Second
	}
	if s.Strata == "" {
		s.Strata = "/usr/bin/strata"
	}
	hostKeys, err := knownhosts.New(s.KnownHosts)
	if err != nil {
		return fmt.Errorf("ssh: reading known hosts %s: %w", s.KnownHosts, err)
	}
	var signers []ssh.Signer
	ids := s.Identities
	explicit := len(ids) > 0
	if !explicit {
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			ids = append(ids, filepath.Join(home, ".ssh", n))
		}
	}
	for _, p := range ids {
		raw, err := safefile.Read(p, 1<<20)
		if err != nil {
			if !explicit && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("ssh: reading identity %s: %w", p, err)
		}
		sg, err := ssh.ParsePrivateKey(raw)
		var missing *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &missing):
			if explicit {
				return fmt.Errorf("ssh: identity %s is protected by a passphrase: load it into ssh-agent instead", p)
			}
			continue
		case err != nil:
			return fmt.Errorf("ssh: identity %s: %w", p, err)
		}
		signers = append(signers, sg)
	}
	auth := []ssh.AuthMethod{}
	var agentErr error
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		// One connection to the agent serves every handshake (its
		// client serialises requests).
		c, err := net.DialTimeout("unix", sock, s.Timeout)
		if err != nil {
			agentErr = fmt.Errorf("ssh-agent %s: %w", sock, err)
		} else {
			s.agent = c
			auth = append(auth, ssh.PublicKeysCallback(agent.NewClient(c).Signers))
		}
	}
	if len(signers) > 0 {
		auth = append(auth, ssh.PublicKeys(signers...))
	}
	if len(auth) == 0 {
		return errors.Join(errors.New("ssh: no key to log in with: no ssh-agent ($SSH_AUTH_SOCK) and no identity file (--identity)"), agentErr)
	}
	s.config = &ssh.ClientConfig{HostKeyCallback: hostKeys, Auth: auth, Timeout: s.Timeout}
	return nil
}

// session is one SSH connection to a node.
type session struct {
	c    *ssh.Client
	node string
	s    *SSH
}

// dial connects to n over SSH, honouring ctx.
func (s *SSH) dial(ctx context.Context, n Node) (*session, error) {
	if err := s.Prepare(); err != nil {
		return nil, err
	}
	addr := n.Address
	if addr == "" {
		addr = n.Name
	}
	host, port, err := SplitAddress(addr)
	if err != nil {
		return nil, err
	}
	hostport := net.JoinHostPort(host, strconv.Itoa(port))
	cfg := *s.config
	cfg.User = s.User
	if n.User != "" {
		cfg.User = n.User
	}
	c, err := s.handshake(ctx, hostport, &cfg)
	var ke *knownhosts.KeyError
	if errors.As(err, &ke) && len(ke.Want) > 0 {
		// known_hosts has keys for the host, but not of the type the
		// host offered first: ask for those types only (OpenSSH
		// records one key per host, the host may have several).
		cfg.HostKeyAlgorithms = hostKeyAlgorithms(ke.Want)
		c, err = s.handshake(ctx, hostport, &cfg)
	}
	if err != nil {
		return nil, err
	}
	return &session{c: c, node: hostport, s: s}, nil
}

// handshake connects to hostport and runs the SSH handshake, both within
// s.Timeout.
func (s *SSH) handshake(ctx context.Context, hostport string, cfg *ssh.ClientConfig) (*ssh.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", hostport)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", hostport, err)
	}
	// The handshake is bounded too: a host that accepts and then stays
	// silent does not hold the rollout.
	stop := context.AfterFunc(dctx, func() { conn.Close() })
	c, chans, reqs, err := ssh.NewClientConn(conn, hostport, cfg)
	stopped := stop()
	if err != nil {
		conn.Close()
		if !stopped {
			return nil, fmt.Errorf("ssh %s: handshake: %w", hostport, dctx.Err())
		}
		return nil, fmt.Errorf("ssh %s: %w", hostport, err)
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// hostKeyAlgorithms lists the host key algorithms of known keys.
func hostKeyAlgorithms(keys []knownhosts.KnownKey) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range keys {
		algos := []string{k.Key.Type()}
		if k.Key.Type() == ssh.KeyAlgoRSA {
			algos = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
		}
		for _, a := range algos {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

func (se *session) Close() error { return se.c.Close() }

// ExitError is a remote command that ran and exited non-zero.
type ExitError struct {
	Code int
	// Stderr is what it printed on stderr (bounded), trimmed.
	Stderr string
}

func (e *ExitError) Error() string {
	msg := lastLine(e.Stderr)
	// strata --json reports its error as {"error": ..., "exit_code": N}.
	var doc struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(msg), &doc) == nil && doc.Error != "" {
		msg = doc.Error
	}
	if msg == "" {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return fmt.Sprintf("exit status %d: %s", e.Code, msg)
}

// lastLine is the last non-empty line of s: a failing strata's error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// run runs argv on the node with stdin, returning its stdout. The command
// line is built by quoting every argument for the remote user's shell
// (SSH passes one string), so no argument is ever interpreted by it. A
// non-zero exit is an *ExitError; ctx ends the session.
func (se *session) run(ctx context.Context, stdin io.Reader, argv ...string) ([]byte, error) {
	return se.runLimit(ctx, stdin, maxStdout, argv...)
}

// runLimit is run with stdout bounded at limit bytes.
func (se *session) runLimit(ctx context.Context, stdin io.Reader, limit int, argv ...string) ([]byte, error) {
	sess, err := se.c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", se.node, err)
	}
	defer sess.Close()
	stdout := &limitBuffer{max: limit}
	stderr := &limitBuffer{max: maxStderr}
	sess.Stdout, sess.Stderr, sess.Stdin = stdout, stderr, stdin
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	err = sess.Run(ShellQuote(argv))
	if ctx.Err() != nil {
		return nil, fmt.Errorf("ssh %s: %s: %w", se.node, argv[0], ctx.Err())
	}
	var ee *ssh.ExitError
	switch {
	case errors.As(err, &ee):
		return stdout.Bytes(), &ExitError{Code: ee.ExitStatus(), Stderr: stderr.String()}
	case err != nil:
		return nil, fmt.Errorf("ssh %s: %s: %w", se.node, argv[0], err)
	case stdout.over:
		return nil, fmt.Errorf("ssh %s: %s printed more than %d bytes", se.node, argv[0], limit)
	case stderr.over:
		return nil, fmt.Errorf("ssh %s: %s printed more than %d bytes on stderr", se.node, argv[0], maxStderr)
	}
	return stdout.Bytes(), nil
}

// ShellQuote joins argv into one POSIX shell command line in which every
// argument is a single-quoted word: the remote shell runs argv as given.
func ShellQuote(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(a, "'", `'\''`))
		b.WriteByte('\'')
	}
	return b.String()
}

// limitBuffer keeps the first max bytes written and notes the excess. It
// has no ReadFrom (an embedded bytes.Buffer's would let io.Copy bypass
// the bound).
type limitBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (l *limitBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); len(p) > room {
		l.over = true
		if room > 0 {
			l.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return l.buf.Write(p)
}

func (l *limitBuffer) Bytes() []byte  { return l.buf.Bytes() }
func (l *limitBuffer) String() string { return l.buf.String() }
