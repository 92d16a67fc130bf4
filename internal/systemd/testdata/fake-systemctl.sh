#!/bin/sh
# A stand-in for systemctl: logs its arguments, one per line, to $1 and
# acts by the mode in $2. Used by systemctl_test.go.
log=$1 mode=$2
shift 2
for a in "$@"; do printf '%s\n' "$a" >>"$log"; done
printf -- '--end--\n' >>"$log"
case $mode in
ok) ;;
list)
	case " $* " in
	*" list-units "*)
		printf 'cron.service loaded active running Cron daemon\n'
		printf 'rsyslog.service loaded active running System Logging Service\n'
		printf 'bad;name.service loaded active running injected\n'
		;;
	*" show "*)
		printf 'Id=cron.service\nNames=cron.service\nMainPID=10\nActiveState=active\n\n'
		printf 'Id=rsyslog.service\nNames=rsyslog.service syslog.service\nMainPID=11\nActiveState=active\n'
		;;
	esac
	;;
garbage) printf 'this is not systemctl show output\n' ;;
fail)
	echo "Job for nginx.service failed because the control process exited with error code." >&2
	exit 1
	;;
flood) exec yes 'Id=x.service' ;;
hang) exec sleep 60 ;;
esac
