package nodeimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpulab/gpulab/testbeds/kind/images"
	"github.com/gpulab/gpulab/testbeds/kind/internal/command"
)

// Suite is the Debian release of the node's root file system.
const Suite = "bookworm"

// DefaultMirror is the Debian mirror debootstrap fetches from.
const DefaultMirror = "http://deb.debian.org/debian"

// BasePackages are what a kind node runs besides its own binaries: systemd
// as init, the tools the kubelet, kube-proxy and kubeadm call (iptables,
// conntrack, ip, mount, ethtool, socat, nsenter), Debian's runc, and bash
// for the entrypoint.
var BasePackages = []string{
	"systemd", "systemd-sysv", "dbus", "bash", "ca-certificates", "procps",
	"iptables", "nftables", "iproute2", "conntrack", "ethtool", "socat", "kmod",
	"mount", "util-linux", "e2fsprogs", "libseccomp2", "pigz", "runc",
}

// BaseRef is the base image's reference: it changes with the suite, the
// mirror and the package list, the inputs of debootstrap.
func BaseRef(mirror string) string {
	h := sha256.Sum256([]byte(Suite + "\x00" + mirror + "\x00" + strings.Join(BasePackages, ",")))
	return "gpulab-kind-base:" + Suite + "-" + hex.EncodeToString(h[:])[:12]
}

// EnsureBase builds the base image unless it exists, and returns its
// reference: from the cached root file system tarball when there is one
// (seconds), else with debootstrap (as root; one to three minutes, ten on
// a loaded machine).
func EnsureBase(ctx context.Context, opts Options) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	ref := BaseRef(opts.Mirror)
	if images.Exists(ctx, ref) {
		return ref, nil
	}
	start := time.Now()
	// The root file system's tarball stays in the cache: a Docker whose
	// images are gone (a fresh CI machine with a restored .cache) imports
	// it again in seconds instead of running debootstrap.
	tarball := filepath.Join(opts.CacheDir, "kind", "base", strings.TrimPrefix(ref, "gpulab-kind-base:")+".tar")
	if _, err := os.Stat(tarball); err != nil {
		if err := debootstrap(ctx, opts, ref, tarball); err != nil {
			return "", err
		}
	}
	if err := command.Run(ctx, command.Cmd{Name: "docker", Args: []string{"import",
		"--change", "ENV container=docker", "--change", `ENTRYPOINT ["/sbin/init"]`, tarball, ref}}); err != nil {
		return "", fmt.Errorf("importing the base image: %w", err)
	}
	fmt.Fprintf(opts.Log, "built %s in %s\n", ref, time.Since(start).Round(time.Second))
	return ref, nil
}

// debootstrap makes the root file system and packs it into tarball.
func debootstrap(ctx context.Context, opts Options, ref, tarball string) error {
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return fmt.Errorf("building the kind base image needs debootstrap (Debian: apt-get install -y debootstrap): %w", err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("debootstrap needs root to build the kind base image %s", ref)
	}
	work := filepath.Join(opts.WorkDir, "base")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	rootfs := filepath.Join(work, "rootfs")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fmt.Fprintf(opts.Log, "building %s: debootstrap %s from %s...\n", ref, Suite, opts.Mirror)
	// A mirror answers a download with an error now and then; debootstrap
	// gives up at the first, so a fresh attempt gets a few more chances.
	for attempt := 1; ; attempt++ {
		err := command.Run(ctx, command.Cmd{Name: "debootstrap", Args: []string{
			"--variant=minbase", "--include=" + strings.Join(BasePackages, ","), Suite, rootfs, opts.Mirror,
		}})
		if err == nil {
			break
		}
		if attempt == 3 || ctx.Err() != nil {
			return fmt.Errorf("debootstrap (attempt %d): %w", attempt, err)
		}
		fmt.Fprintf(opts.Log, "debootstrap failed (attempt %d), retrying: %v\n", attempt, firstLine(err))
		if err := os.RemoveAll(rootfs); err != nil {
			return err
		}
	}
	if err := trimRootfs(rootfs); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(tarball), 0o755); err != nil {
		return err
	}
	partial := tarball + ".partial"
	if err := command.Run(ctx, command.Cmd{Name: "tar", Args: []string{"--numeric-owner", "-C", rootfs, "-cf", partial, "."}}); err != nil {
		return err
	}
	return os.Rename(partial, tarball)
}

// trimRootfs makes the debootstrapped system boot as a container: no apt
// caches, no kernel log reading, no units that need real hardware.
func trimRootfs(root string) error {
	for _, dir := range []string{"var/cache/apt/archives", "var/lib/apt/lists"} {
		entries, _ := os.ReadDir(filepath.Join(root, dir))
		for _, e := range entries {
			if e.Name() != "partial" && e.Name() != "lock" {
				_ = os.RemoveAll(filepath.Join(root, dir, e.Name()))
			}
		}
	}
	conf := filepath.Join(root, "etc/systemd/journald.conf.d")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(conf, "10-container.conf"), []byte("[Journal]\nReadKMsg=no\n"), 0o644); err != nil {
		return err
	}
	for _, unit := range []string{"systemd-binfmt.service", "getty@tty1.service", "systemd-udevd.service", "systemd-modules-load.service"} {
		link := filepath.Join(root, "etc/systemd/system", unit)
		_ = os.Remove(link)
		if err := os.Symlink("/dev/null", link); err != nil {
			return fmt.Errorf("masking %s: %w", unit, err)
		}
	}
	return os.WriteFile(filepath.Join(root, "etc/machine-id"), nil, 0o444)
}

func firstLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}
