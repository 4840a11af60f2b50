package testproc

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	Main(m, map[string]func(string) error{
		"count": func(spec string) error {
			n, err := strconv.Atoi(spec)
			if err != nil {
				return err
			}
			for i := 0; i < n; i++ {
				fmt.Println("line", i)
			}
			return nil
		},
		"fail": func(string) error { return errors.New("as asked") },
	})
}

// TestChildRoles: a child runs its role with its spec, its lines arrive in
// order and end with it; a failing role exits 2 with its error on stderr.
func TestChildRoles(t *testing.T) {
	p := Start(t, Command("count", "3"))
	for i := 0; i < 3; i++ {
		p.Expect(t, fmt.Sprint("line ", i), 10*time.Second)
	}
	if l, ok := <-p.Lines; ok {
		t.Fatalf("a line past the end: %q", l)
	}
	if err := p.Cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	f := Start(t, Command("fail", ""))
	for range f.Lines {
	}
	var ee interface{ ExitCode() int }
	if err := f.Cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 2 || f.Stderr() != "fail: as asked\n" {
		t.Fatalf("failing child: %v, stderr %q", err, f.Stderr())
	}
}
