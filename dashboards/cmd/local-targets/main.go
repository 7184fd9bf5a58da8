// Command local-targets writes the file_sd target files of the local scrape
// config (dashboards/prometheus/local/targets/) from a running local
// testbed's ports:
//
//	go run ./dashboards/cmd/local-targets --operator=127.0.0.1:18080 --pushgateway=127.0.0.1:9091
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/gpulab/gpulab/dashboards"
	"github.com/gpulab/gpulab/testbeds/local"
)

func main() {
	name := flag.String("testbed-name", "gpulab", "local testbed name (TESTBED_NAME)")
	out := flag.String("out", "dashboards/prometheus/local/targets", "directory of the file_sd files")
	operator := flag.String("operator", "127.0.0.1:18080", "operator metrics address (make run-operator serves 127.0.0.1:18080); empty for none")
	pushgateway := flag.String("pushgateway", "127.0.0.1:9091", "Pushgateway address; empty for none")
	cluster := flag.String("cluster", "", "cluster label on every target (the dashboards' cluster variable); default the testbed name, \"none\" for no label")
	flag.Parse()
	if *cluster == "" {
		*cluster = *name
	}
	if *cluster == "none" {
		*cluster = ""
	}
	if err := run(*name, *out, *operator, *pushgateway, *cluster); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(name, out, operator, pushgateway, cluster string) error {
	tb, err := local.New(local.Options{Name: name})
	if err != nil {
		return err
	}
	st, err := tb.Status(context.Background())
	if err != nil {
		return err
	}
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	t := dashboards.LocalTargets{
		Operator: operator, Pushgateway: pushgateway,
		Agent: addr(st.Ports.AgentMetrics), VolcanoScheduler: addr(st.Ports.SchedulerMetrics),
		Cluster: cluster,
	}
	if local.ControllerManagerMetrics(tb.Versions().Volcano) {
		t.VolcanoControllerManager = addr(st.Ports.ControllerManagerMetrics)
	}
	if err := t.Write(out); err != nil {
		return err
	}
	fmt.Printf("wrote %s: operator %s, agent %s, volcano-scheduler %s, pushgateway %s, cluster %q\n", out, t.Operator, t.Agent, t.VolcanoScheduler, t.Pushgateway, t.Cluster)
	return nil
}
