package aptsources

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Dir is where apt's sources are.
const Dir = "/etc/apt"

// ErrNone reports that the host's apt sources name no archive to use.
var ErrNone = errors.New("no archive in the host's apt sources")

// Source is one "deb" entry: an archive URI and the suites it serves.
type Source struct {
	URI    string
	Suites []string
}

// Mirror returns the archive the host's apt sources under dir (Dir on a
// real host) fetch suite from: the URI of the first "deb" entry that
// lists suite, else of the first one serving no "-security" or
// "-updates" suite (a Debian host's main archive), over http or https.
func Mirror(dir, suite string) (string, error) {
	srcs, err := Read(dir)
	if err != nil {
		return "", err
	}
	for _, s := range srcs {
		for _, su := range s.Suites {
			if su == suite {
				return s.URI, nil
			}
		}
	}
	for _, s := range srcs {
		main := true
		for _, su := range s.Suites {
			if strings.Contains(su, "-") {
				main = false
			}
		}
		if main {
			return s.URI, nil
		}
	}
	return "", fmt.Errorf("%w (%s/sources.list, %s/sources.list.d) serves %s", ErrNone, dir, dir, suite)
}

// Read returns the "deb" entries of dir/sources.list and of the *.list
// and *.sources files in dir/sources.list.d, in the order apt reads them,
// keeping only http and https URIs. Each file is read up to 1 MiB.
func Read(dir string) ([]Source, error) {
	files := []string{filepath.Join(dir, "sources.list")}
	more, err := filepath.Glob(filepath.Join(dir, "sources.list.d", "*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(more)
	files = append(files, more...)
	var out []Source
	for _, f := range files {
		var srcs []Source
		var err error
		switch {
		case strings.HasSuffix(f, ".sources"):
			srcs, err = readDeb822(f)
		case strings.HasSuffix(f, ".list"):
			srcs, err = readList(f)
		default:
			continue
		}
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, srcs...)
	}
	return out, nil
}

// maxFile bounds a sources file.
const maxFile = 1 << 20

// lines returns the lines of the regular file f (at most maxFile bytes).
func lines(f string) ([]string, error) {
	fi, err := os.Stat(f)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil
	}
	if fi.Size() > maxFile {
		return nil, fmt.Errorf("reading %s: larger than %d bytes", f, maxFile)
	}
	fh, err := os.Open(f)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var out []string
	sc := bufio.NewScanner(io.LimitReader(fh, maxFile))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", f, err)
	}
	return out, nil
}

// readList reads one-line entries: "deb [options] URI suite [component...]".
func readList(f string) ([]Source, error) {
	ls, err := lines(f)
	if err != nil {
		return nil, err
	}
	var out []Source
	for _, l := range ls {
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		fields := strings.Fields(l)
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") {
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) == 0 {
				continue
			}
			fields = fields[1:]
		}
		if len(fields) < 2 || !web(fields[0]) {
			continue
		}
		out = append(out, Source{URI: fields[0], Suites: []string{fields[1]}})
	}
	return out, nil
}

// readDeb822 reads stanzas of "Types:", "URIs:", "Suites:" (and
// "Enabled: no", which drops one).
func readDeb822(f string) ([]Source, error) {
	ls, err := lines(f)
	if err != nil {
		return nil, err
	}
	var out []Source
	stanza := map[string]string{}
	flush := func() {
		defer func() { stanza = map[string]string{} }()
		if !strings.EqualFold(stanza["enabled"], "no") && hasWord(stanza["types"], "deb") {
			for _, uri := range strings.Fields(stanza["uris"]) {
				if web(uri) {
					out = append(out, Source{URI: uri, Suites: strings.Fields(stanza["suites"])})
				}
			}
		}
	}
	key := ""
	for _, l := range ls {
		switch {
		case strings.TrimSpace(l) == "":
			flush()
			key = ""
		case strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t"):
			if key != "" {
				stanza[key] += " " + strings.TrimSpace(l)
			}
		default:
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			key = strings.ToLower(strings.TrimSpace(k))
			stanza[key] = strings.TrimSpace(v)
		}
	}
	flush()
	return out, nil
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

func web(uri string) bool {
	return strings.HasPrefix(uri, "http://") || strings.HasPrefix(uri, "https://")
}
