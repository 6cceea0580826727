// Command coredns is CoreDNS, from its own module, with the plugins that the Corefile kubeadm
// writes for a cluster uses (cmd/kubeadm/app/phases/addons/dns/manifests.go) and no others:
// CoreDNS's documented way to choose plugins at build time, an external main around coremain.
// The full set links the Azure, AWS and Google Cloud SDKs, which took most of kind's offline
// build and which a kind cluster never loads.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The order is CoreDNS's own (core/dnsserver/zdirectives.go): each plugin sees a request after
// those before it.
func init() {
	dnsserver.Directives = []string{
		"reload",
		"ready",
		"health",
		"prometheus",
		"errors",
		"loadbalance",
		"cache",
		"kubernetes",
		"loop",
		"forward",
	}
}

func main() {
	coremain.Run()
}
