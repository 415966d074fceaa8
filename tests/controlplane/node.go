package main

import (
	"context"

	"k8s.io/component-base/cli"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
)

// The node's programs, each as its upstream main in cmd/<name>/<name>.go.

func runKubelet(args []string) int {
	command := kubeletapp.NewKubeletCommand(context.Background())
	command.SetArgs(args)
	return cli.Run(command)
}

func runScheduler(args []string) int {
	command := schedulerapp.NewSchedulerCommand()
	command.SetArgs(args)
	return cli.Run(command)
}

func runProxy(args []string) int {
	command := proxyapp.NewProxyCommand()
	command.SetArgs(args)
	return cli.Run(command)
}
