package squashfs

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Cat returns the content of the regular file at tree-relative path rel in
// image, read with `rdsquashfs --cat` without unpacking anything else.
func Cat(ctx context.Context, image, rel string) ([]byte, error) {
	bin, err := exec.LookPath("rdsquashfs")
	if err != nil {
		return nil, fmt.Errorf("%w: rdsquashfs not found (install squashfs-tools-ng): %v", ErrTool, err)
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--cat", "/"+rel, image)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("reading %s from image %s: %w: %s", rel, image, toolErr(ctx, err), strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}
