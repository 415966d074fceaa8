package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream's main
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// etcdFlags are the flags this wrapper consumes before handing the rest to
// kube-apiserver: where embedded etcd keeps its data and which URLs it serves.
type etcdFlags struct {
	dir       string
	clientURL string
	peerURL   string
}

func splitEtcdFlags(args []string) (etcdFlags, []string, error) {
	var flags etcdFlags
	rest := make([]string, 0, len(args))
	for _, arg := range args {
		switch {
		case strings.HasPrefix(arg, "--etcd-dir="):
			flags.dir = strings.TrimPrefix(arg, "--etcd-dir=")
		case strings.HasPrefix(arg, "--etcd-client-url="):
			flags.clientURL = strings.TrimPrefix(arg, "--etcd-client-url=")
		case strings.HasPrefix(arg, "--etcd-peer-url="):
			flags.peerURL = strings.TrimPrefix(arg, "--etcd-peer-url=")
		default:
			rest = append(rest, arg)
		}
	}
	if flags.dir == "" || flags.clientURL == "" || flags.peerURL == "" {
		return flags, nil, fmt.Errorf("kube-apiserver here needs --etcd-dir, --etcd-client-url and --etcd-peer-url")
	}
	return flags, rest, nil
}

// startEtcd runs etcd in this process; the API server reaches it on loopback.
func startEtcd(flags etcdFlags) (*embed.Etcd, error) {
	clientURL, err := url.Parse(flags.clientURL)
	if err != nil {
		return nil, fmt.Errorf("--etcd-client-url: %w", err)
	}
	peerURL, err := url.Parse(flags.peerURL)
	if err != nil {
		return nil, fmt.Errorf("--etcd-peer-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "agentrun-test"
	cfg.Dir = flags.dir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	// A test cluster never needs to survive a power cut: skip fsync for speed, unless
	// AGENTRUN_ETCD_FSYNC=1 (a benchmark that states its durability: bench/journal).
	cfg.UnsafeNoFsync = os.Getenv("AGENTRUN_ETCD_FSYNC") != "1"
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-etcd.Server.ReadyNotify():
		return etcd, nil
	case <-time.After(60 * time.Second):
		etcd.Close()
		return nil, fmt.Errorf("embedded etcd not ready within 60s")
	}
}

func runAPIServer(args []string) int {
	flags, rest, err := splitEtcdFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	etcd, err := startEtcd(flags)
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded etcd:", err)
		return 1
	}
	defer etcd.Close()
	command := apiserverapp.NewAPIServerCommand()
	command.SetArgs(append(rest, "--etcd-servers="+flags.clientURL))
	return cli.Run(command)
}
