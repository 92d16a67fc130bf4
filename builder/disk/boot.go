package disk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
)

// DefaultBootEFI is systemd-boot's EFI binary as Debian's systemd-boot-efi
// package installs it.
const DefaultBootEFI = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"

// ESP paths of what Provision writes there.
const (
	espFallback = "/EFI/BOOT/BOOTX64.EFI"
	espBoot     = "/EFI/systemd/systemd-bootx64.efi"
	espLoader   = "/loader/loader.conf"
	espEntry    = "/loader/entries/strata-1-a.conf"
	espKernel   = "/strata/a/vmlinuz"
	espInitrd   = "/strata/a/initrd.img"
	espVerity   = "/strata/a/" + verityInitrd
)

// bootFiles are the image's kernel and initrd (image paths, and copies in
// the work directory); kernel is empty when the image has none.
type bootFiles struct {
	kernel, initrd         string
	kernelFile, initrdFile string
	title, rootA           string
	// hostname, when set, is passed to systemd on the kernel command line
	// (systemd.hostname=), since the image's /etc/hostname is read-only.
	hostname string
	// strataFile is a copy of the image's strata binary ("" if it has
	// none); verity opens the root through dm-verity (nil: unverified).
	strataFile string
	verity     *verityBoot
}

// bootCandidate reports whether image path p may be a kernel or an
// initrd, and the kernel version it belongs to: boot/vmlinuz-V,
// boot/initrd.img-V, usr/lib/modules/V/vmlinuz, usr/lib/modules/V/initrd.
func bootCandidate(p string) (kernel bool, version string, ok bool) {
	dir, base := path.Split(p)
	switch {
	case dir == "boot/" && strings.HasPrefix(base, "vmlinuz-"):
		return true, strings.TrimPrefix(base, "vmlinuz-"), true
	case dir == "boot/" && strings.HasPrefix(base, "initrd.img-"):
		return false, strings.TrimPrefix(base, "initrd.img-"), true
	case strings.HasPrefix(dir, "usr/lib/modules/") && strings.Count(dir, "/") == 4 && (base == "vmlinuz" || base == "initrd"):
		return base == "vmlinuz", strings.TrimSuffix(strings.TrimPrefix(dir, "usr/lib/modules/"), "/"), true
	}
	return false, "", false
}

// verifyImage checks the image against its verified manifest entry by
// entry (builder.WalkImage) and every file's content against the manifest's
// SHA-256, keeping copies of kernels and initrds in work. It picks the
// highest kernel version and its initrd.
func verifyImage(ctx context.Context, image string, im *repo.Image, work string) (*bootFiles, error) {
	kernels := map[string]string{} // version -> image path
	initrds := map[string]string{}
	files := map[string]string{} // image path -> work copy
	strataFile := ""
	err := builder.WalkImage(ctx, image, im, func(e manifests.Entry, r io.Reader) error {
		if e.Type != manifests.TypeFile || e.Path == manifests.ImageManifestPath {
			return nil
		}
		var w io.Writer = io.Discard
		isKernel, version, boot := bootCandidate(e.Path)
		if e.Path == builder.StrataBinaryPath {
			f, err := os.Create(filepath.Join(work, "strata"))
			if err != nil {
				return fmt.Errorf("verifying %s: %w", image, err)
			}
			defer f.Close()
			strataFile, w = f.Name(), f
		}
		if boot {
			f, err := os.Create(filepath.Join(work, "boot"+strconv.Itoa(len(files))))
			if err != nil {
				return fmt.Errorf("verifying %s: %w", image, err)
			}
			defer f.Close()
			files[e.Path] = f.Name()
			if isKernel {
				kernels[version] = e.Path
			} else {
				initrds[version] = e.Path
			}
			w = f
		}
		h := sha256.New()
		n, err := io.Copy(w, io.TeeReader(r, h))
		if err != nil {
			return fmt.Errorf("verifying %s: /%s: %w", image, e.Path, err)
		}
		if n != e.Size || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
			return fmt.Errorf("image %s: content of /%s does not match the manifest: %w", image, e.Path, builder.ErrImageMismatch)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	b := &bootFiles{title: fmt.Sprintf("strata %s %s", im.Manifest.Line, im.Manifest.Version), strataFile: strataFile}
	var versions []string
	for v := range kernels {
		if initrds[v] != "" {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		return b, nil
	}
	sort.Slice(versions, func(i, j int) bool { return versionLess(versions[i], versions[j]) })
	v := versions[len(versions)-1]
	b.kernel, b.initrd = kernels[v], initrds[v]
	b.kernelFile, b.initrdFile = files[b.kernel], files[b.initrd]
	if b.verity, err = makeVerityBoot(ctx, image, im, strataFile, work); err != nil {
		return nil, err
	}
	return b, nil
}

// versionLess orders kernel versions: runs of digits compare as numbers,
// everything else byte by byte ("6.1.0-9" < "6.1.0-10").
func versionLess(a, b string) bool {
	for a != "" && b != "" {
		ra, rb := leadingRun(a), leadingRun(b)
		if ra != rb {
			na, ea := strconv.ParseUint(ra, 10, 64)
			nb, eb := strconv.ParseUint(rb, 10, 64)
			if ea == nil && eb == nil && na != nb {
				return na < nb
			}
			return ra < rb
		}
		a, b = a[len(ra):], b[len(rb):]
	}
	return len(a) < len(b)
}

// leadingRun is s's leading run of digits, or of non-digits.
func leadingRun(s string) string {
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	i := 1
	for i < len(s) && digit(s[i]) == digit(s[0]) {
		i++
	}
	return s[:i]
}

// writeESP makes the FAT32 ESP (partition p of target) with mkfs.fat and
// fills it with mtools: systemd-boot (also as the removable-media fallback
// loader), loader.conf and, when the image has a kernel, the kernel, the
// initrd and a loader entry booting root A read-only, with the kernel
// console on the first serial port as well as the screen. With sb (Secure
// Boot), the signed systemd-boot and the signed UKI take their place (see
// signBoot). (go-diskfs 1.9.4's FAT32 writer leaves wrong ".." entries in
// subdirectories of the root and an unset free-cluster count, which
// fsck.vfat reports.)
func writeESP(ctx context.Context, target string, p Partition, b *bootFiles, bootEFI string, sb *signedBoot, work string) error {
	if bootEFI == "" {
		bootEFI = DefaultBootEFI
	}
	if sb == nil {
		// A Secure Boot disk gets the signed copy instead.
		if _, err := os.Stat(bootEFI); err != nil {
			return fmt.Errorf("systemd-boot (install systemd-boot-efi): %w", err)
		}
	}
	volID := strings.ReplaceAll(p.GUID, "-", "")[:8]
	if err := tool(ctx, "mkfs.fat", "-F", "32", "-s", "1", "-n", "ESP", "--invariant", "-i", volID,
		"--offset="+strconv.FormatInt(p.Offset/sectorSize, 10), target, strconv.FormatInt(p.Size/1024, 10)); err != nil {
		return err
	}
	img := fmt.Sprintf("%s@@%d", target, p.Offset)
	dirs := []string{"::/EFI", "::/EFI/BOOT", "::/EFI/systemd", "::/loader", "::/loader/entries"}
	if sb != nil {
		dirs = append(dirs, "::"+ukiDir)
	} else {
		dirs = append(dirs, "::/strata", "::/strata/a")
	}
	if err := tool(ctx, "mmd", append([]string{"-i", img}, dirs...)...); err != nil {
		return err
	}
	loader := "timeout 3\n"
	if b.kernel != "" {
		loader = loaderDefault + loader
	}
	texts := map[string]string{espLoader: loader}
	puts := map[string]string{espFallback: bootEFI, espBoot: bootEFI}
	switch {
	case sb != nil:
		texts[espLoader] = loaderSB
		puts[espFallback], puts[espBoot] = sb.bootEFI, sb.bootEFI
		puts[ukiDir+"/strata-1-a.efi"] = sb.uki
	case b.kernel != "":
		puts[espKernel], puts[espInitrd] = b.kernelFile, b.initrdFile
		e := BootEntry{Title: b.title, Linux: espKernel, Initrd: espInitrd, Options: bootOptions(b)}
		if b.verity != nil {
			puts[espVerity] = b.verity.initrd
			e.VerityInitrd = espVerity
		}
		texts[espEntry] = entryText(e)
	}
	for dst, text := range texts {
		src := filepath.Join(work, path.Base(dst))
		if err := os.WriteFile(src, []byte(text), 0o644); err != nil {
			return fmt.Errorf("ESP: %w", err)
		}
		puts[dst] = src
	}
	for dst, src := range puts {
		if err := tool(ctx, "mcopy", "-o", "-i", img, src, "::"+dst); err != nil {
			return err
		}
	}
	return nil
}

// tool runs a program, returning its output in the error if it fails.
func tool(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
