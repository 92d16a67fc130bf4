package testnode

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// mountInfo is one line of /proc/PID/mountinfo.
type mountInfo struct {
	Root   string // path inside the filesystem that is mounted
	Point  string // mount point
	FSType string
	Source string
}

// readMountinfo parses a mountinfo file (proc(5)).
func readMountinfo(path string) ([]mountInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	var ms []mountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m, err := parseMountinfoLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("reading mounts %s: %w", path, err)
		}
		ms = append(ms, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mounts %s: %w", path, err)
	}
	return ms, nil
}

// parseMountinfoLine parses "ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS".
func parseMountinfoLine(line string) (mountInfo, error) {
	fields := strings.Fields(line)
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if len(fields) < 6 || sep < 0 || sep+2 >= len(fields) {
		return mountInfo{}, fmt.Errorf("malformed mountinfo line %q", line)
	}
	return mountInfo{
		Root:   unescapeMount(fields[3]),
		Point:  unescapeMount(fields[4]),
		FSType: fields[sep+1],
		Source: unescapeMount(fields[sep+2]),
	}, nil
}

// unescapeMount undoes the kernel's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
