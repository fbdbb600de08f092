package plan

import (
	"context"
	"strings"
	"testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

func TestProjectOffline(t *testing.T) {
	prices, err := pricing.ParseTable(strings.NewReader("m5.large on-demand eu-west-1 0.1\nm5.large spot eu-west-1a 0.03\nm5.large spot * 0.05\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := strategy.Parse("eks.amazonaws.com/capacityType=ON_DEMAND,base=1:karpenter.sh/capacity-type=spot,topology.kubernetes.io/zone=eu-west-1a,weight=1:karpenter.sh/capacity-type=spot,node.kubernetes.io/instance-type=x9.huge,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	terms, totals := ProjectOffline(context.Background(), s, 5, OfflineOptions{InstanceType: "m5.large", Region: "eu-west-1"}, prices)
	// 5 replicas: 1 on-demand, 2 spot in eu-west-1a, 2 on the unknown type; a node each.
	if terms[0].MedianUSDPerHour != 0.1 || terms[0].CheapestOffering != "m5.large on-demand" {
		t.Errorf("on-demand term %+v", terms[0])
	}
	if terms[1].MedianUSDPerHour != 0.06 || terms[1].OnDemandMedianUSDPerHour != 0.2 {
		t.Errorf("spot term (zone price) %+v", terms[1])
	}
	if terms[2].Offerings != 0 || len(terms[2].Unpriced) != 1 || !strings.Contains(terms[2].Unpriced[0], "x9.huge") {
		t.Errorf("unknown type term %+v", terms[2])
	}
	if totals.MedianUSDPerHour != 0.16 || totals.OnDemandMedianUSDPerHour != 0.3 || totals.SavingUSDPerHour != 0.14 || totals.SavingPercent != 46.7 {
		t.Errorf("totals %+v", totals)
	}
}
