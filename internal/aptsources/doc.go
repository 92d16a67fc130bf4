// Package aptsources reads the build host's apt sources (deb822
// *.sources files and one-line *.list files) to find the archive a
// debootstrap base is fetched from when a recipe names none: strata
// names no archive host of its own.
package aptsources
