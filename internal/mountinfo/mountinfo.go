package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of a mountinfo table.
type Mount struct {
	// ID and Parent are the mount's id and its parent's.
	ID, Parent int
	// Root is the path inside the file system that is mounted.
	Root string
	// Point is the mount point.
	Point string
	// FSType is the file system type ("ext4", "overlay").
	FSType string
	// Source is the mount source ("/dev/vda", "strata").
	Source string
	// Options are the super block options.
	Options string
}

// Read returns the calling thread's mount table, in the kernel's order
// (a mount comes after the one it is mounted on).
func Read() ([]Mount, error) {
	return ReadFile("/proc/thread-self/mountinfo")
}

// ReadFile parses the mountinfo file at path (/proc/PID/mountinfo).
func ReadFile(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	ms, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table %s: %w", path, err)
	}
	return ms, nil
}

// Parse reads a mountinfo table: lines of "ID PARENT MAJ:MIN ROOT POINT
// OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS".
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		m, err := parseLine(sc.Text())
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

func parseLine(line string) (Mount, error) {
	fields := strings.Fields(line)
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+3 >= len(fields) {
		return Mount{}, fmt.Errorf("malformed mountinfo line %q", line)
	}
	id, err1 := strconv.Atoi(fields[0])
	parent, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil {
		return Mount{}, fmt.Errorf("malformed mountinfo line %q", line)
	}
	return Mount{
		ID:      id,
		Parent:  parent,
		Root:    Unescape(fields[3]),
		Point:   Unescape(fields[4]),
		FSType:  fields[sep+1],
		Source:  Unescape(fields[sep+2]),
		Options: fields[sep+3],
	}, nil
}

// Unescape undoes the octal escapes (\040 for a space) of mountinfo
// paths.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
