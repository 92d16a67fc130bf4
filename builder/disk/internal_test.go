package disk

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

func TestVersionLess(t *testing.T) {
	for _, c := range [][2]string{{"6.1.0-9", "6.1.0-10"}, {"5.10", "6.1"}, {"6.1", "6.1.1"}, {"6.1.0-9-amd64", "6.1.0-10-amd64"}, {"a", "b"}} {
		if !versionLess(c[0], c[1]) || versionLess(c[1], c[0]) {
			t.Errorf("%s < %s is not what versionLess says", c[0], c[1])
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4G": 4 << 30, "512M": 512 << 20, "512MiB": 512 << 20, "1t": 1 << 40, "65536": 65536, "64K": 64 << 10} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "-1G", "4X", "1.5G", "99999999999T"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

func TestPlanDisk(t *testing.T) {
	l, err := planLayout(0, 10<<20, "sha256:x", "n")
	if err != nil {
		t.Fatal(err)
	}
	if l.Size != MinSize(10<<20)-MinStateSize+DefaultStateSize || l.Part(PartState).Size != DefaultStateSize {
		t.Fatalf("default layout %+v", l)
	}
	end := gptReserve
	for _, p := range l.Partitions {
		if p.Offset != end || p.Offset%MiB != 0 || p.Size%MiB != 0 {
			t.Fatalf("partition %+v not contiguous and MiB-aligned", p)
		}
		end += p.Size
	}
	if end+gptReserve != l.Size || l.Part(PartRootA).Size != MinRootSize || l.Part(PartRootB).Size != MinRootSize {
		t.Fatalf("layout %+v", l)
	}
	if RootSize(100<<20) != 200<<20 {
		t.Fatalf("RootSize(100MiB) = %d", RootSize(100<<20))
	}
	if _, err := planLayout(MinSize(10<<20)-MiB, 10<<20, "d", "n"); !errors.Is(err, ErrTooSmall) {
		t.Fatalf("one MiB short: %v", err)
	}
}

// TestCheckNotMounted checks the mount check against the host's mounted
// block devices (read-only: nothing is written).
func TestCheckNotMounted(t *testing.T) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checked := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x != "-" || i+2 >= len(fields) || !strings.HasPrefix(fields[i+2], "/dev/") {
				continue
			}
			fi, err := os.Stat(fields[i+2])
			if err != nil || fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
				continue
			}
			if err := checkNotMounted(fields[i+2], fi); !errors.Is(err, ErrMounted) {
				t.Errorf("%s is mounted, yet checkNotMounted says %v", fields[i+2], err)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("found no mounted block device to check against")
	}
}

// TestRootPartitionSys: a root on a partition is that partition; a
// dm-verity root is the one partition below it; a device-mapper root
// over two devices is not a disk node's.
func TestRootPartitionSys(t *testing.T) {
	dir := t.TempDir()
	part := filepath.Join(dir, "devices", "vda", "vda3")
	dm := filepath.Join(dir, "devices", "dm-0")
	two := filepath.Join(dir, "devices", "dm-1")
	for _, d := range []string{part, filepath.Join(dm, "dm"), filepath.Join(dm, "slaves"), filepath.Join(two, "dm"), filepath.Join(two, "slaves")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(part, filepath.Join(dm, "slaves", "vda3")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"vda2", "vdb1"} {
		if err := os.Symlink(part, filepath.Join(two, "slaves", n)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := rootPartitionSys(part); err != nil || got != part {
		t.Fatalf("a partition: %q %v", got, err)
	}
	if got, err := rootPartitionSys(dm); err != nil || got != part {
		t.Fatalf("a dm-verity root: %q %v, want %s", got, err, part)
	}
	if _, err := rootPartitionSys(two); !errors.Is(err, ErrNotNodeDisk) {
		t.Fatalf("a dm root over two devices: %v", err)
	}
}

// Get copies a file off the ESP to a new host file, and refuses (leaving
// nothing) one over its limit: a UKI whose signature is checked is read
// whole, so a planted endless or huge one must not fill the host.
func TestESPGetLimit(t *testing.T) {
	esp := dirESP{root: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(esp.root, "EFI/Linux"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(esp.root, "EFI/Linux/a.efi"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "a.efi")
	if err := esp.Get("/EFI/Linux/a.efi", dst, 5); err == nil || !strings.Contains(err.Error(), "larger than 5 bytes") {
		t.Fatalf("a 10-byte file with a limit of 5: %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused copy was left behind: %v", err)
	}
	if err := esp.Get("/EFI/Linux/a.efi", dst, 10); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "0123456789" {
		t.Fatalf("copied %q, %v", b, err)
	}
	if err := esp.Get("/EFI/Linux/a.efi", dst, 10); err == nil {
		t.Fatal("Get wrote over an existing file")
	}
}

// copyEFI refuses what is not a regular file with the rejection it is
// given, and reports a missing file as it is: an I/O error, no rejection.
func TestCopyEFIErrors(t *testing.T) {
	dir := t.TempDir()
	reject := manifests.Rejection("test rejection")
	err := copyEFI("signed boot loader", reject, filepath.Join(dir, "missing.efi"), filepath.Join(dir, "out1"))
	if !errors.Is(err, os.ErrNotExist) || errors.Is(err, reject) || !strings.HasPrefix(err.Error(), "signed boot loader: ") {
		t.Errorf("missing file: %v, want a not-exist error naming the loader, no rejection", err)
	}
	fifo := filepath.Join(dir, "fifo.efi")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := copyEFI("boot image", reject, fifo, filepath.Join(dir, "out2")); !errors.Is(err, reject) {
		t.Errorf("FIFO: %v, want the rejection", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "out2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused copy left its output: %v", err)
	}
}
