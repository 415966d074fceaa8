package main

import (
	"k8s.io/component-base/cli"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func runControllerManager(args []string) int {
	command := kcmapp.NewControllerManagerCommand()
	command.SetArgs(args)
	return cli.Run(command)
}
