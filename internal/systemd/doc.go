// Package systemd fits a recorded restart plan to a running systemd and
// carries it out through systemctl.
//
// A restart plan (catalog.Plan, overlay's plan) names every catalog unit a
// change touches. Restarting all of them on a live node is wrong: a libc
// update reaches systemd-halt.service, rescue.service, templates such as
// getty@.service, aliases such as syslog.service next to rsyslog.service,
// dbus.service and oneshot units such as apt-daily-upgrade.service.
// [Resolve] takes the plan, the catalog, the changed paths and a snapshot
// of the manager's loaded units ([Manager.Units]) and returns [Resolved]:
// what to do now ([Step]), what must wait for a reboot (Deferred) and what
// needs nothing (Skipped), each with a [Reason]. [Run] carries it out
// through a [Controller]; [Systemctl] is both the Manager and the
// Controller of a real systemd.
//
// # Rules
//
//   - Only active (or reloading) units are acted on, with try-restart and
//     try-reload-or-restart, which do nothing to a unit that stopped in
//     the meantime. Inactive, failed and not-loaded units are skipped;
//     nothing is ever started.
//   - A template (foo@.service) stands for its loaded instances; a
//     template without one is skipped.
//   - Names resolve to the unit's ID (syslog.service to rsyslog.service)
//     and each ID is acted on once: stop wins over restart, restart over
//     reload, the causes are merged, and the other names are reported in
//     Also and as Skipped with ReasonAlias. A stop through an alias (the
//     alias link was removed) does not stop the unit.
//   - A unit with no running process (a oneshot, or a RemainAfterExit
//     unit in sub-state "exited") whose causes are only programs and
//     libraries is skipped: nothing running has the old files mapped. A
//     unit file, declared path, or a cause the catalog does not explain
//     still acts on it.
//   - When the manager's own program or libraries change (paths matching
//     Request.ManagerFiles, by default [DefaultManagerFiles]) the plan
//     starts with daemon-reexec, which also reloads units; nothing that is
//     systemd itself is restarted (user@.service is never restarted, and
//     PID 1 has no unit).
//   - Only .service units are acted on live; units matching a
//     never-restart pattern ([DefaultNeverRestart], or
//     Request.NeverRestart) and units with RefuseManualStart=yes or
//     RefuseManualStop=yes are Deferred: reboot required. So is an active
//     unit whose definition failed to load, unless it is being stopped.
//   - Stops (a unit whose definition the change removed) apply to active
//     units only, and are done before the restarts.
//
// # What was adopted from needrestart
//
// The rules follow needrestart 3.11 (github.com/liske/needrestart, commit
// 6d7a76b065dc82386f3e10a77f4cb1bca853804b):
//
//   - ex/needrestart.conf, $nrconf{override_rc}: every default pattern is
//     in [DefaultNeverRestart] with the same spelling: ^dbus (dbus.service
//     and dbus-broker.service), display managers, networking daemons,
//     ^getty@.+\.service, ^user@\d+\.service, ^emergency\.service$,
//     ^rescue\.service$, ^systemd-logind, ^elogind, the oneshots
//     ^apt-daily\.service$, ^apt-daily-upgrade\.service$,
//     ^unattended-upgrades\.service$, ^cron-.*\.service$ (Debian #862840,
//     #917073), ^rc-local\.service$ and ^systemd-nspawn. needrestart skips
//     them by default and lists them; here they are Deferred.
//   - needrestart's systemd_refuse_restart: a unit with
//     RefuseManualStop=yes is not restarted. RefuseManualStart=yes is
//     treated the same, since a restart is a stop and a start.
//   - needrestart treats PID 1 (cgroup /init.scope or /lib/systemd/systemd)
//     as "systemd-manager", whose restart.d script runs
//     `systemctl daemon-reexec`; here that is Resolved.DaemonReexec.
//   - needrestart only restarts units with a process mapping an old file
//     (it scans /proc); a unit with no process is never restarted for a
//     library change. Here that is the no-process rule.
//
// strata adds: serial-getty@, container-getty@, console-getty and
// user-runtime-dir@ (needrestart's ^getty@ and ^user@ miss them), the
// shutdown and initrd units (systemd-halt, -poweroff, -reboot, -kexec,
// -soft-reboot, initrd-*), which try-restart would skip anyway as they are
// never active on a running system, and the stop rules.
//
// # Talking to systemd
//
// [Systemctl] runs systemctl with an argument vector (configurable with
// [WithCommand], for example through nsenter into a test node), checks
// every unit name with manifests.ValidUnit and puts it after "--", reads
// at most [DefaultOutputLimit] bytes, and honours the context. It targets
// systemd 252 (Debian bookworm). There, `systemctl list-units --all
// --output=json` does print a JSON array (tried against 252.39, although
// its --help describes --output for journal formats only), but with only
// unit, load, active, sub and description; the properties Resolve needs
// (Names, Type, MainPID, RefuseManualStart/Stop) come from `systemctl
// show -p ... -- UNIT...` in any case. So Systemctl lists names with
// `list-units --all --plain --no-legend --full` (first column only) and
// reads `show` output: blank-line separated KEY=VALUE records, with list
// values such as Names double-quoted and C-escaped when a name has a
// backslash.
//
// The package performs no output of its own.
package systemd
