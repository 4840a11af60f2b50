package nemesis

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// nftPath is where Debian installs nft.
const nftPath = "/usr/sbin/nft"

// tablePrefix names the nftables tables of this package; the suffix is
// the owning process's id, so a later run can tell a stale table (its
// process gone) from a live one.
const tablePrefix = "sluice_nemesis_"

// Firewall partitions storage nodes on loopback with one nftables table
// of this process: packets to and from a blocked port are dropped (not
// refused), so the node's peers see it go silent, as on a real network.
type Firewall struct {
	table string
}

// NewFirewall removes stale tables of earlier runs and creates this
// process's; an error means partitions cannot run here (no nft, not
// root, no netfilter).
func NewFirewall() (*Firewall, error) {
	if _, err := os.Stat(nftPath); err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	if err := removeStaleTables(); err != nil {
		return nil, err
	}
	f := &Firewall{table: fmt.Sprint(tablePrefix, os.Getpid())}
	script := fmt.Sprintf(`table inet %[1]s {
	set blocked { type inet_service; }
	chain input { type filter hook input priority -10; policy accept; tcp dport @blocked drop; tcp sport @blocked drop; }
	chain output { type filter hook output priority -10; policy accept; tcp dport @blocked drop; tcp sport @blocked drop; }
}
`, f.table)
	exec.Command(nftPath, "delete", "table", "inet", f.table).Run() // a table of a reused pid
	if err := nft(script, "-f", "-"); err != nil {
		return nil, err
	}
	return f, nil
}

// removeStaleTables deletes the tables of this package whose process is
// gone.
func removeStaleTables() error {
	out, err := exec.Command(nftPath, "list", "tables").CombinedOutput()
	if err != nil {
		return fmt.Errorf("nftables: list tables: %v: %s", err, bytes.TrimSpace(out))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text()) // table inet NAME
		if len(f) != 3 || !strings.HasPrefix(f[2], tablePrefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(f[2], tablePrefix))
		if err == nil && pid != os.Getpid() {
			if _, err := os.Stat(fmt.Sprint("/proc/", pid)); err == nil {
				continue // its run is still going
			}
		}
		if err := nft("", "delete", "table", f[1], f[2]); err != nil {
			return err
		}
	}
	return nil
}

func nft(stdin string, args ...string) error {
	cmd := exec.Command(nftPath, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Block drops TCP to and from port.
func (f *Firewall) Block(port int) error {
	return nft("", "add", "element", "inet", f.table, "blocked", fmt.Sprintf("{ %d }", port))
}

// Unblock lets port through again.
func (f *Firewall) Unblock(port int) error {
	return nft("", "delete", "element", "inet", f.table, "blocked", fmt.Sprintf("{ %d }", port))
}

// Close deletes the table.
func (f *Firewall) Close() error {
	if f == nil {
		return nil
	}
	err := nft("", "delete", "table", "inet", f.table)
	if err != nil && strings.Contains(err.Error(), "No such file") {
		return nil
	}
	return err
}

// portOf is addr's port.
func portOf(addr string) (int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return 0, errors.New("no port in " + addr)
	}
	return strconv.Atoi(addr[i+1:])
}
