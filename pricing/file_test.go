package pricing

import (
	"context"
	"errors"
	"strings"
	"testing"
)

const sampleFile = `# instance-type capacity-type where usd-per-hour
m5.large  on-demand us-east-1  0.096
m5.large  spot      us-east-1a 0.0351   # the cheapest zone
m5.large  SPOT      *          0.04
c5.xlarge ON_DEMAND *          0.17
`

func TestTableLooksUpZoneThenRegionThenAnywhere(t *testing.T) {
	tab, err := ParseTable(strings.NewReader(sampleFile))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() != 4 {
		t.Fatalf("Len = %d, want 4", tab.Len())
	}
	cases := []struct {
		key  Key
		want float64
	}{
		{Key{InstanceType: "m5.large", CapacityType: Spot, Region: "us-east-1", Zone: "us-east-1a"}, 0.0351},
		{Key{InstanceType: "m5.large", CapacityType: Spot, Region: "us-east-1", Zone: "us-east-1b"}, 0.04},
		{Key{InstanceType: "m5.large", CapacityType: OnDemand, Region: "us-east-1", Zone: "us-east-1b"}, 0.096},
		{Key{InstanceType: "c5.xlarge", CapacityType: OnDemand, Region: "eu-west-1"}, 0.17},
	}
	for _, c := range cases {
		got, err := tab.Price(context.Background(), c.key)
		if err != nil || got != c.want {
			t.Errorf("Price(%s) = %v, %v; want %v", c.key, got, err, c.want)
		}
	}
	_, err = tab.Price(context.Background(), Key{InstanceType: "m5.large", CapacityType: OnDemand, Region: "eu-west-1"})
	if !errors.Is(err, ErrNoPrice) || !strings.Contains(err.Error(), "m5.large on-demand eu-west-1") {
		t.Fatalf("unknown location: err = %v, want ErrNoPrice naming the key", err)
	}
	if _, err := tab.Price(context.Background(), Key{InstanceType: "m5.large", CapacityType: "reserved"}); err == nil {
		t.Fatal("a capacity type other than on-demand or spot was priced")
	}
}

func TestParseTableErrorsNameTheLine(t *testing.T) {
	cases := map[string]string{
		"m5.large on-demand * 0.1\nm5.large spot *\n":          "line 2: 3 fields",
		"m5.large reserved * 0.1\n":                            `line 1: capacity type "reserved"`,
		"m5.large spot * -1\n":                                 `line 1: price "-1"`,
		"m5.large spot * NaN\n":                                `line 1: price "NaN"`,
		"m5.large spot * 1\nm5.large spot * 2\n":               "line 2: m5.large spot * priced twice",
		"# nothing but a comment\n\n":                          "no prices",
		"m5.large spot * " + strings.Repeat("9", maxLine) + "": "reading",
	}
	for in, want := range cases {
		_, err := ParseTable(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTable(%.40q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestLoadFileMissing(t *testing.T) {
	_, err := LoadFile(t.TempDir() + "/absent.prices")
	if err == nil || !strings.Contains(err.Error(), "price file") {
		t.Fatalf("err = %v, want one naming the price file", err)
	}
}

func FuzzParseTable(f *testing.F) {
	f.Add(sampleFile)
	f.Add("m5.large spot * 1e308\n")
	f.Add("x on_demand a 0x1p-2\n")
	f.Add("\x00 spot * 1\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		tab, err := ParseTable(strings.NewReader(in))
		if err != nil {
			if tab != nil {
				t.Fatal("a table with an error")
			}
			return
		}
		if tab.Len() == 0 {
			t.Fatal("a table without prices and no error")
		}
		for k, p := range tab.prices {
			if p < 0 || p != p || k.capacityType != OnDemand && k.capacityType != Spot {
				t.Fatalf("accepted %+v = %v", k, p)
			}
			got, err := tab.Price(context.Background(), Key{InstanceType: k.instanceType, CapacityType: k.capacityType, Zone: k.location})
			if err != nil || got != p {
				t.Fatalf("Price of a parsed line %+v = %v, %v; want %v", k, got, err, p)
			}
		}
	})
}
