// Package runtimeshim lets Docker run privileged containers on hosts whose
// capability bounding set is smaller than what `--privileged` asks for (some
// sandboxes drop CAP_SYS_RESOURCE): runc refuses to start a process with a
// capability its parent cannot grant ("unable to apply caps"). The shim sits
// between dockerd and runc as an OCI runtime, removes from the OCI process
// spec the capabilities the bounding set lacks, and then runs runc.
//
// It is a workaround for restricted hosts only: where the bounding set is
// full, nothing needs it and the testbed does not install it.
package runtimeshim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// capNames are the capabilities by number, as the OCI runtime spec names
// them (linux/capability.h order).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// Bounding reads the capability bounding set (CapBnd) from a
// /proc/<pid>/status file and returns the names of the capabilities in it.
func Bounding(statusFile string) (map[string]bool, error) {
	data, err := os.ReadFile(statusFile)
	if err != nil {
		return nil, fmt.Errorf("reading the capability bounding set: %w", err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		hex, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parsing CapBnd %q in %s: %w", strings.TrimSpace(hex), statusFile, err)
		}
		set := map[string]bool{}
		for i, name := range capNames {
			if mask&(1<<i) != 0 {
				set[name] = true
			}
		}
		return set, nil
	}
	return nil, fmt.Errorf("no CapBnd line in %s", statusFile)
}

// Missing lists the capabilities a privileged container asks for that the
// bounding set lacks. Capabilities numbered above lastCap (the kernel's
// /proc/sys/kernel/cap_last_cap) do not exist on this kernel: runc never
// asks for them, so they never count as missing.
func Missing(bounding map[string]bool, lastCap int) []string {
	var missing []string
	for i, name := range capNames {
		if i <= lastCap && !bounding[name] {
			missing = append(missing, name)
		}
	}
	return missing
}

// LastCap reads the number of the kernel's highest capability from path
// (/proc/sys/kernel/cap_last_cap).
func LastCap(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading the kernel's last capability: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("parsing %s: %q is not a capability number", path, strings.TrimSpace(string(data)))
	}
	return n, nil
}

// capSets are the process.capabilities fields of an OCI spec.
var capSets = []string{"bounding", "effective", "inheritable", "permitted", "ambient"}

// FilterProcess removes from an OCI process object (process in config.json,
// or the whole --process file of `runc exec`) every capability not in
// allowed. It returns how many it removed; other fields are kept as they are.
func FilterProcess(process map[string]any, allowed map[string]bool) (int, error) {
	raw, ok := process["capabilities"]
	if !ok || raw == nil {
		return 0, nil
	}
	caps, ok := raw.(map[string]any)
	if !ok {
		return 0, fmt.Errorf("process.capabilities is %T, want an object", raw)
	}
	removed := 0
	for _, set := range capSets {
		list, ok := caps[set].([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(list))
		for _, c := range list {
			if name, _ := c.(string); allowed[name] {
				kept = append(kept, c)
			} else {
				removed++
			}
		}
		caps[set] = kept
	}
	return removed, nil
}

// FilterFile rewrites a JSON file in place with FilterProcess applied: at
// the top level (a --process file) or under "process" (a bundle's
// config.json), as field says ("" or "process").
func FilterFile(path, field string, allowed map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	process := doc
	if field != "" {
		p, ok := doc[field].(map[string]any)
		if !ok {
			return nil // a spec without a process (none to start) has nothing to filter
		}
		process = p
	}
	removed, err := FilterProcess(process, allowed)
	if err != nil || removed == 0 {
		return err
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp := path + ".gpulab-runc"
	if err := os.WriteFile(tmp, out, info.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// SpecFile finds, in runc's arguments, the file that holds the process to
// start: the bundle's config.json for create and run (--bundle, -b, or the
// working directory), the --process file for exec. field is where the
// process sits in it (see FilterFile). ok is false for every other command,
// which the shim passes through untouched.
func SpecFile(args []string, workDir string) (path, field string, ok bool) {
	cmd, rest := subcommand(args)
	switch cmd {
	case "create", "run":
		bundle := flagValue(rest, "bundle", "b")
		if bundle == "" {
			bundle = workDir
		}
		return filepath.Join(bundle, "config.json"), "process", true
	case "exec":
		if p := flagValue(rest, "process", "p"); p != "" {
			return p, "", true
		}
		// exec without --process takes its capabilities from --cap flags,
		// which callers here never pass.
		return "", "", false
	}
	return "", "", false
}

// runcGlobalValueFlags are runc's global flags that take a separate value.
var runcGlobalValueFlags = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}

// subcommand skips runc's global flags and returns the command and its
// arguments.
func subcommand(args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, args[i+1:]
		}
		if runcGlobalValueFlags[a] {
			i++
		}
	}
	return "", nil
}

// flagValue returns the value of --long/-short in args (either "--long v"
// or "--long=v").
func flagValue(args []string, long, short string) string {
	for i, a := range args {
		for _, name := range []string{"--" + long, "-" + long, "-" + short} {
			if a == name && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v
			}
		}
	}
	return ""
}
