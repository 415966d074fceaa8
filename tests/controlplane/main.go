// Command agentrun-controlplane is a multi-call binary holding a real Kubernetes
// control plane and node for agentrun-operator's tests: kube-apiserver (with etcd
// embedded in the same process), kube-controller-manager, kube-scheduler, kubelet,
// kube-proxy, kubectl, and a helper that writes the PKI they need.
//
// Why one binary: these programs share almost all of their dependencies, so
// one build and one link on a 2-core machine costs a fraction of six. The
// program to run is chosen by the name it was invoked as (a symlink named kubectl
// runs kubectl) or by the first argument.
//
// Everything here is upstream code from k8s.io/kubernetes at the version in
// KUBE_VERSION; this file only wires it together and starts etcd in-process.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if _, known := programs[name]; !known {
		if len(args) == 0 {
			usage()
		}
		name, args = args[0], args[1:]
	}
	run, known := programs[name]
	if !known {
		usage()
	}
	os.Args = append([]string{name}, args...)
	os.Exit(run(args))
}

var programs = map[string]func(args []string) int{
	"kube-apiserver":          runAPIServer,
	"kube-controller-manager": runControllerManager,
	"kube-proxy":              runProxy,
	"kube-scheduler":          runScheduler,
	"kubectl":                 runKubectl,
	"kubelet":                 runKubelet,
	"pki":                     runPKI,
}

func usage() {
	names := make([]string, 0, len(programs))
	for name := range programs {
		names = append(names, name)
	}
	fmt.Fprintf(os.Stderr, "usage: agentrun-controlplane {%s} [flags]\n", strings.Join(names, "|"))
	os.Exit(2)
}
