package main

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
)

// machine describes where and with what a run happened.
type machine struct {
	cpu     string // model name
	online  int    // CPUs online
	allowed string // CPUs this process may run on (Cpus_allowed_list)
	pinned  bool   // allowed fewer CPUs than are online (taskset)
	modules []string
	redis   string
	commit  string // of the library's repository, from git describe
}

// modulesOfInterest are the modules whose versions the report names.
var modulesOfInterest = []string{
	"github.com/redis/go-redis/v9",
	"github.com/bsm/redislock",
	"github.com/go-redsync/redsync/v4",
	"go.etcd.io/etcd/client/v3",
	"github.com/redisleader/redisleader",
}

func describeMachine() machine {
	m := machine{cpu: "unknown", allowed: "unknown", redis: redisVersion(), commit: gitDescribe()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			switch k = strings.TrimSpace(k); {
			case !ok:
			case k == "processor":
				m.online++
			case k == "model name" && m.cpu == "unknown":
				m.cpu = strings.TrimSpace(v)
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				m.allowed = strings.TrimSpace(v)
			}
		}
	}
	m.pinned = m.online > 0 && runtime.NumCPU() < m.online
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, want := range modulesOfInterest {
			for _, d := range bi.Deps {
				if d.Path != want {
					continue
				}
				s := d.Path + " " + d.Version
				if d.Replace != nil {
					s = d.Path + " => " + strings.TrimSpace(d.Replace.Path+" "+d.Replace.Version)
				}
				m.modules = append(m.modules, s)
			}
		}
	}
	return m
}

// gitDescribe names the checkout the library is built from ("-dirty" when it
// has uncommitted changes).
func gitDescribe() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown (not a git checkout?)"
	}
	return strings.TrimSpace(string(out))
}

// rerun is the command that repeats this run.
func (m machine) rerun() string {
	cmd := "cd bench && "
	if m.pinned {
		cmd += "taskset -c " + m.allowed + " "
	}
	cmd += "go run ."
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t'\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		cmd += " " + a
	}
	return cmd
}
