package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/strata-dev/strata/internal/decodeerr"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/node"
)

// DefaultConfigPath is where a node's agent configuration lives.
const DefaultConfigPath = "/etc/strata/agent.yaml"

// maxConfigSize bounds the configuration file.
const maxConfigSize = 64 << 10

// Config is the agent's configuration (/etc/strata/agent.yaml):
//
//	repo: https://repo.example.net/strata/   # required: a URL or a directory
//	interval: 2m                              # between polls (at least 1s)
//	jitter: 20%                               # each wait varies by up to this much
//	max_backoff: 30m                          # the longest wait after failures
//	channel: stable                           # or candidate: take prereleases too
type Config struct {
	Repo       string   `yaml:"repo"`
	Interval   Duration `yaml:"interval"`
	Jitter     Percent  `yaml:"jitter"`
	MaxBackoff Duration `yaml:"max_backoff"`
	// Channel is node.ChannelStable (default) or ChannelCandidate.
	Channel string `yaml:"channel"`
	// OverwriteLocalEdits lets the agent replace and delete files changed
	// on the node since its head (apply-overlay --force); by default it
	// refuses such an apply and reports it (reason local_edit).
	OverwriteLocalEdits bool `yaml:"overwrite_local_edits"`
}

// The defaults of Config.
const (
	DefaultInterval   = 2 * time.Minute
	DefaultJitter     = 20
	DefaultMaxBackoff = 30 * time.Minute
)

// The bounds of interval and max_backoff.
const (
	MaxInterval     = 24 * time.Hour
	MaxBackoffLimit = 7 * 24 * time.Hour
)

// ErrNotConfigured reports an agent without a configuration file and
// without a repository given on its command line: it polls nothing.
var ErrNotConfigured = errors.New("not configured")

// Duration is a time.Duration written as Go writes one ("2m", "90s").
type Duration time.Duration

// UnmarshalYAML parses a duration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v <= 0 {
		return fmt.Errorf("line %d: %q is not a positive duration such as 2m or 90s", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// Percent is a share written as "20%" (or 20).
type Percent int

// UnmarshalYAML parses a percentage from 0 to 100.
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParsePercent(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*p = v
	return nil
}

// ParsePercent parses "20%" or "20".
func ParsePercent(s string) (Percent, error) {
	v, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || v < 0 || v > 100 {
		return 0, fmt.Errorf("%q is not a percentage from 0%% to 100%%", s)
	}
	return Percent(v), nil
}

// LoadConfig reads the configuration at path over base (defaults and the
// command line's settings, DefaultJitter included): what the file sets
// wins. A missing file is base
// alone, ErrNotConfigured when that names no repository.
func LoadConfig(path string, base Config) (Config, error) {
	raw, err := safefile.Read(path, maxConfigSize)
	return parseConfig(path, raw, err, base)
}

// LoadConfigIn is LoadConfig of the node at root's own configuration
// (DefaultConfigPath below root), read without following a link on the
// way: a node's tree cannot point the agent at another file.
func LoadConfigIn(root string, base Config) (Config, error) {
	rel := strings.TrimPrefix(DefaultConfigPath, "/")
	raw, err := safefile.ReadBeneath(root, rel, maxConfigSize)
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EXDEV) {
		err = fmt.Errorf("it is a symbolic link, or reached through one: the node's own configuration is read without following links (put the file there, or give --config): %w", err)
	}
	return parseConfig(filepath.Join(root, rel), raw, err, base)
}

// parseConfig reads the configuration file at path (raw, or the error
// reading it) over base.
func parseConfig(path string, raw []byte, err error, base Config) (Config, error) {
	c := base
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if c.Repo == "" {
			return c, fmt.Errorf("%s does not exist and no --repo was given: %w", path, ErrNotConfigured)
		}
	case err != nil:
		return c, fmt.Errorf("reading %s: %w", path, err)
	default:
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty file
			return c, fmt.Errorf("%s: %w", path, decodeerr.YAML(err))
		}
	}
	return c, c.validate()
}

// validate fills in defaults and checks the settings.
func (c *Config) validate() error {
	if c.Repo == "" {
		// A file emptied, or its repo taken out: on purpose, as deleting
		// it is, so the agent stops following rather than carry on with
		// the last good config.
		return fmt.Errorf("repo: none given (a repository URL or directory): %w", ErrNotConfigured)
	}
	if _, err := repo.Locate(c.Repo); err != nil {
		return fmt.Errorf("repo: %w", err)
	}
	if c.Interval == 0 {
		c.Interval = Duration(DefaultInterval)
	}
	if time.Duration(c.Interval) < time.Second || time.Duration(c.Interval) > MaxInterval {
		return fmt.Errorf("interval %s: from 1s to %s", time.Duration(c.Interval), MaxInterval)
	}
	if time.Duration(c.MaxBackoff) > MaxBackoffLimit {
		return fmt.Errorf("max_backoff %s: at most %s", time.Duration(c.MaxBackoff), MaxBackoffLimit)
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = Duration(max(DefaultMaxBackoff, time.Duration(c.Interval)))
	}
	if err := node.CheckChannel(c.Channel); err != nil {
		return fmt.Errorf("channel: %w", err)
	}
	if c.MaxBackoff < c.Interval {
		return fmt.Errorf("max_backoff %s is shorter than interval %s", time.Duration(c.MaxBackoff), time.Duration(c.Interval))
	}
	return nil
}
