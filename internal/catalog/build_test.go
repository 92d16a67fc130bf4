package catalog

import (
	"errors"
	"io/fs"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/strata-dev/strata/manifests"
)

const sysd = "etc/systemd/system/"
const vendor = "usr/lib/systemd/system/"

// demoTree is a merged-/usr tree with vendor and admin units, drop-ins,
// masks, enablement links, scripts and symlinked programs.
func demoTree() fstest.MapFS {
	return fstest.MapFS{
		"bin": link("usr/bin"),
		"lib": link("usr/lib"),

		"usr/bin/dash":           file("not elf"),
		"usr/bin/sh":             link("dash"),
		"usr/bin/env":            file("env"),
		"usr/bin/python3":        link("python3.12"),
		"usr/bin/python3.12":     file("python"),
		"usr/bin/kill":           file("kill"),
		"usr/bin/web":            file("web"),
		"usr/sbin/webctl":        link("/opt/web/bin/webctl"),
		"opt/web/bin/webctl":     file("#!/bin/sh -e\necho\n"),
		"usr/local/bin/job.py":   file("#!/usr/bin/env -S python3 -u\n"),
		"usr/bin/post":           file("post"),
		"usr/bin/never":          file("never"),
		"usr/bin/old":            file("old"),
		"opt/units/linked.svc":   file("[Service]\nExecStart=/usr/bin/linked\n"),
		"etc/demo/web.conf":      file("x"),
		"usr/bin/selfscript":     file("#!/usr/bin/selfscript\n"),
		"usr/bin/vendor-only":    file("v"),
		"usr/bin/template":       file("t"),
		"opt/not-a-unit.service": file("[Service]\nExecStart=/usr/bin/never\n"),

		// web: admin definition overrides the vendor one; drop-ins from
		// both directories; a masked vendor drop-in.
		sysd + "web.service": file(`# admin copy
[Unit]
Description=Web
X-Strata-Paths=/etc/demo/web.conf \
  /etc/demo/certs/
[Service]
ExecStartPre=-!/usr/sbin/webctl check
ExecStart=/usr/bin/web --config /etc/demo/web.conf
ExecReload=kill -HUP $MAINPID
`),
		vendor + "web.service":                 file("[Service]\nExecStart=/usr/bin/old\n"),
		sysd + "web.service.d/10-reload.conf":  file("[Service]\nX-Strata-Reload-Paths=/etc/demo/vhosts\n"),
		vendor + "web.service.d/20-post.conf":  file("[Service]\nExecStartPost=/usr/bin/post\n"),
		vendor + "web.service.d/30-never.conf": file("[Service]\nExecStartPost=/usr/bin/never\n"),
		sysd + "web.service.d/30-never.conf":   link("/dev/null"),
		sysd + "web.service.d/README":          file("[Service]\nExecStart=/usr/bin/never\n"),

		// Enablement links and a mask are not unit definitions.
		sysd + "multi-user.target.wants/web.service":   link("/usr/lib/systemd/system/web.service"),
		sysd + "multi-user.target.wants/ghost.service": link("/usr/lib/systemd/system/ghost.service"),
		sysd + "masked.service":                        link("/dev/null"),
		sysd + "relmask.service":                       link("../../../dev/null"),
		sysd + "orphan.service.d/x.conf":               file("[Service]\nExecStart=/usr/bin/never\n"),

		// A linked unit file, a script chain via env, vendor-only units
		// seen through the lib -> usr/lib link, a self-interpreting script.
		sysd + "linked.service":         link("/opt/units/linked.svc"),
		vendor + "job.service":          file("[Service]\nExecStart=/usr/local/bin/job.py\n"),
		vendor + "vendor.service":       file("[Service]\nExecStart=vendor-only\n"),
		vendor + "self.service":         file("[Service]\nExecStart=/usr/bin/selfscript\nExecStartPost=missing-command\n"),
		vendor + "tmpl@.service":        file("[Service]\nExecStart=/usr/bin/template %i\n"),
		vendor + "reset.service":        file("[Service]\nExecStart=/usr/bin/never\n"),
		sysd + "reset.service.d/a.conf": file("[Service]\nExecStart=\nExecStart=/usr/bin/post\n"),
	}
}

func TestBuild(t *testing.T) {
	cat, err := Build(demoTree(), []Declared{
		{Unit: "web.service", Path: "etc/demo/extra"},
		{Unit: "web.service", Path: "etc/demo/vhosts", Reload: true},
		{Unit: "job.service", Path: "etc/job", Reload: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []manifests.Service{
		{
			Unit:        "job.service",
			UnitFiles:   []string{vendor + "job.service"},
			Binaries:    []string{"usr/bin/env", "usr/bin/python3", "usr/bin/python3.12", "usr/local/bin/job.py"},
			ReloadPaths: []string{"etc/job"},
		},
		{
			Unit:      "linked.service",
			UnitFiles: []string{sysd + "linked.service", "opt/units/linked.svc"},
			Binaries:  []string{"usr/bin/linked"},
		},
		{
			Unit:      "reset.service",
			UnitFiles: []string{sysd + "reset.service.d/a.conf", vendor + "reset.service"},
			Binaries:  []string{"usr/bin/post"},
		},
		{
			Unit:      "self.service",
			UnitFiles: []string{vendor + "self.service"},
			Binaries:  []string{"usr/bin/selfscript"},
		},
		{
			Unit:      "tmpl@.service",
			UnitFiles: []string{vendor + "tmpl@.service"},
			Binaries:  []string{"usr/bin/template"},
		},
		{
			Unit:      "vendor.service",
			UnitFiles: []string{vendor + "vendor.service"},
			Binaries:  []string{"usr/bin/vendor-only"},
		},
		{
			Unit: "web.service",
			UnitFiles: []string{
				sysd + "web.service",
				sysd + "web.service.d/10-reload.conf",
				sysd + "web.service.d/30-never.conf", // a masked drop-in still matters
				vendor + "web.service",
				vendor + "web.service.d/20-post.conf",
				vendor + "web.service.d/30-never.conf",
			},
			Binaries: []string{
				"bin/sh", "opt/web/bin/webctl", "usr/bin/dash", "usr/bin/kill",
				"usr/bin/post", "usr/bin/sh", "usr/bin/web", "usr/sbin/webctl",
			},
			Paths:       []string{"etc/demo/certs", "etc/demo/extra", "etc/demo/web.conf"},
			ReloadPaths: []string{"etc/demo/vhosts"},
		},
	}
	if !reflect.DeepEqual(cat.Services, want) {
		for i := range max(len(want), len(cat.Services)) {
			var g, w manifests.Service
			if i < len(cat.Services) {
				g = cat.Services[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("service %d:\n got %+v\nwant %+v", i, g, w)
			}
		}
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name     string
		extra    fstest.MapFS
		declared []Declared
		want     error
	}{
		{"declared unknown unit", nil, []Declared{{Unit: "nope.service", Path: "etc/x"}}, ErrUnknownUnit},
		{"declared masked unit", nil, []Declared{{Unit: "masked.service", Path: "etc/x"}}, ErrUnknownUnit},
		{"declared absolute path", nil, []Declared{{Unit: "web.service", Path: "/etc/x"}}, ErrBadPath},
		{"declared dot-dot path", nil, []Declared{{Unit: "web.service", Path: "etc/../x"}}, manifests.ErrUnsafePath},
		{"relative X-Strata path", fstest.MapFS{sysd + "bad.service": file("[Unit]\nX-Strata-Paths=etc/x\n")}, nil, ErrBadPath},
		{"root X-Strata reload path", fstest.MapFS{sysd + "bad.service": file("[Unit]\nX-Strata-Reload-Paths=/..\n")}, nil, ErrBadPath},
		{"program link loop", fstest.MapFS{
			sysd + "loop.service": file("[Service]\nExecStart=/usr/bin/l1\n"),
			"usr/bin/l1":          link("l2"),
			"usr/bin/l2":          link("/usr/bin/l1"),
		}, nil, ErrSymlinkLoop},
		{"unit link loop", fstest.MapFS{sysd + "loop.service": link("loop.service")}, nil, ErrSymlinkLoop},
		{"unit directory loop", fstest.MapFS{"lib": link("lib/x")}, nil, ErrSymlinkLoop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := demoTree()
			for k, v := range tt.extra {
				fsys[k] = v
			}
			if _, err := Build(fsys, tt.declared); !errors.Is(err, tt.want) {
				t.Fatalf("Build error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestBuildEmptyAndSeparateLib(t *testing.T) {
	cat, err := Build(fstest.MapFS{}, nil)
	if err != nil || len(cat.Services) != 0 {
		t.Fatalf("empty tree: %+v, %v", cat, err)
	}
	// Without merged /usr, lib/systemd/system is a directory of its own
	// and a unit in several directories lists every file.
	cat, err = Build(fstest.MapFS{
		"lib/systemd/system/a.service":     file("[Service]\nExecStart=/lib-version\n"),
		"usr/lib/systemd/system/a.service": file("[Service]\nExecStart=/usr-version\n"),
		"lib/systemd/system/b.service":     file("[Service]\nExecStart=/b\n"),
		"usr/lib/systemd/system/c.service": &fstest.MapFile{Mode: fs.ModeDir},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []manifests.Service{
		{Unit: "a.service", UnitFiles: []string{"lib/systemd/system/a.service", "usr/lib/systemd/system/a.service"}, Binaries: []string{"usr-version"}},
		{Unit: "b.service", UnitFiles: []string{"lib/systemd/system/b.service"}, Binaries: []string{"b"}},
	}
	if !reflect.DeepEqual(cat.Services, want) {
		t.Errorf("got %+v\nwant %+v", cat.Services, want)
	}
}
