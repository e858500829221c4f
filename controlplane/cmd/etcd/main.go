// Command etcd is the etcd server of the test control plane: the upstream
// etcdmain at the version k8s.io/kubernetes v1.36.3 selects (go.mod). The
// etcd command's own module carries replace directives, so it cannot be
// required; etcdmain is the same entry point its main calls.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
