// Package awsfake is a local stand-in for the AWS APIs the CLI and serve read, for tests and the
// local cluster's demo: the Price List API's GetProducts (JSON 1.1 protocol, X-Amz-Target
// AWSPriceListService.GetProducts) and EC2's DescribeSpotPriceHistory (EC2 query
// protocol, form-encoded request, XML answer) in Server; EKS's ListNodegroups and
// DescribeNodegroup (REST-JSON) in EKS; SQS's queue operations (JSON 1.0 protocol,
// X-Amz-Target AmazonSQS.ReceiveMessage etc.) in SQS, for the interruption signals.
// Requests must carry a SigV4
// Authorization header for the right service, as the real SDK clients send. Any other
// operation answers the protocol's error for an unknown operation.
//
// It is test tooling, not part of the webhook.
package awsfake

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Prices is what the fake sells: on-demand prices per region and instance type, spot
// prices per zone and instance type. The region or zone Anywhere ("*") sells in every
// region, and in every zone asked for.
type Prices struct {
	OnDemand map[string]map[string]float64 // region -> instance type -> USD/h
	Spot     map[string]map[string]float64 // zone -> instance type -> USD/h
}

// Anywhere is the region or zone of a price sold everywhere.
const Anywhere = "*"

// Server answers GetProducts and DescribeSpotPriceHistory from Prices. Safe for
// concurrent use.
type Server struct {
	mu     sync.Mutex
	prices Prices
	calls  map[string]int
	// Fail, when set, is answered to every request with HTTP 500 (a broken AWS).
	fail bool
}

// New returns a Server selling p.
func New(p Prices) *Server { return &Server{prices: p, calls: map[string]int{}} }

// Calls returns how often an operation ("GetProducts", "DescribeSpotPriceHistory") was
// called.
func (s *Server) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// SetFailing makes every later request fail with HTTP 500 (true) or not.
func (s *Server) SetFailing(fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	failing := s.fail
	s.mu.Unlock()
	if target := r.Header.Get("X-Amz-Target"); target != "" {
		s.serveJSON(w, r, target, body, failing)
		return
	}
	s.serveQuery(w, r, body, failing)
}

// signedFor reports whether the request carries a SigV4 signature scoped to service.
func signedFor(r *http.Request, service string) bool {
	auth := r.Header.Get("Authorization")
	return strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") && strings.Contains(auth, "/"+service+"/aws4_request")
}

func (s *Server) count(op string) {
	s.mu.Lock()
	s.calls[op]++
	s.mu.Unlock()
}

type jsonFilter struct {
	Field, Type, Value string
}

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request, target string, body []byte, failing bool) {
	jsonErr := func(status int, typ, msg string) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
	}
	switch {
	case failing:
		jsonErr(http.StatusInternalServerError, "InternalErrorException", "the fake is set to fail")
		return
	case !signedFor(r, "pricing"):
		jsonErr(http.StatusForbidden, "MissingAuthenticationTokenException", "request not signed for service pricing")
		return
	case target != "AWSPriceListService.GetProducts":
		jsonErr(http.StatusBadRequest, "UnknownOperationException", "unknown operation "+target)
		return
	}
	s.count("GetProducts")
	var in struct {
		ServiceCode string
		Filters     []jsonFilter
	}
	if err := json.Unmarshal(body, &in); err != nil || in.ServiceCode != "AmazonEC2" {
		jsonErr(http.StatusBadRequest, "InvalidParameterException", fmt.Sprintf("want ServiceCode AmazonEC2 (%v)", err))
		return
	}
	filter := map[string]string{}
	for _, f := range in.Filters {
		filter[f.Field] = f.Value
	}
	out := struct {
		FormatVersion string
		PriceList     []string
	}{FormatVersion: "aws_v1", PriceList: []string{}}
	s.mu.Lock()
	price, ok := s.prices.OnDemand[filter["regionCode"]][filter["instanceType"]]
	if !ok {
		price, ok = s.prices.OnDemand[Anywhere][filter["instanceType"]]
	}
	s.mu.Unlock()
	if ok {
		out.PriceList = append(out.PriceList, productDoc(filter["instanceType"], filter["regionCode"], price))
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(out)
}

// productDoc is one Price List document with an hourly on-demand price, in the shape
// the real API sends (only the fields a reader needs).
func productDoc(instanceType, region string, usd float64) string {
	doc := map[string]any{
		"product": map[string]any{"productFamily": "Compute Instance", "attributes": map[string]string{
			"instanceType": instanceType, "regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared",
		}},
		"terms": map[string]any{"OnDemand": map[string]any{"SKU.JRTCKXETXF": map[string]any{
			"priceDimensions": map[string]any{"SKU.JRTCKXETXF.6YS6EN2CT7": map[string]any{
				"unit": "Hrs", "pricePerUnit": map[string]string{"USD": strconv.FormatFloat(usd, 'f', 10, 64)},
			}},
		}}},
	}
	b, _ := json.Marshal(doc)
	return string(b)
}

type spotItem struct {
	AvailabilityZone   string `xml:"availabilityZone"`
	InstanceType       string `xml:"instanceType"`
	ProductDescription string `xml:"productDescription"`
	SpotPrice          string `xml:"spotPrice"`
	Timestamp          string `xml:"timestamp"`
}

type spotAnswer struct {
	XMLName   xml.Name   `xml:"DescribeSpotPriceHistoryResponse"`
	XMLNS     string     `xml:"xmlns,attr"`
	RequestID string     `xml:"requestId"`
	Items     []spotItem `xml:"spotPriceHistorySet>item"`
	NextToken string     `xml:"nextToken"`
}

func (s *Server) serveQuery(w http.ResponseWriter, r *http.Request, body []byte, failing bool) {
	queryErr := func(status int, code, msg string) {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>fake</RequestID></Response>`, code, xmlEscape(msg))
	}
	form, err := url.ParseQuery(string(body))
	switch {
	case failing:
		queryErr(http.StatusInternalServerError, "InternalError", "the fake is set to fail")
		return
	case err != nil:
		queryErr(http.StatusBadRequest, "MalformedQueryString", err.Error())
		return
	case !signedFor(r, "ec2"):
		queryErr(http.StatusUnauthorized, "AuthFailure", "request not signed for service ec2")
		return
	case form.Get("Action") != "DescribeSpotPriceHistory":
		queryErr(http.StatusBadRequest, "InvalidAction", "unknown action "+form.Get("Action"))
		return
	}
	s.count("DescribeSpotPriceHistory")
	types := map[string]bool{}
	for k, v := range form {
		if strings.HasPrefix(k, "InstanceType.") {
			types[v[0]] = true
		}
	}
	zone := form.Get("AvailabilityZone")
	out := spotAnswer{XMLNS: "http://ec2.amazonaws.com/doc/2016-11-15/", RequestID: "fake"}
	now := time.Now().UTC().Format(time.RFC3339)
	s.mu.Lock()
	for z, byType := range s.prices.Spot {
		if zone != "" && z != zone && z != Anywhere {
			continue
		}
		answered := z
		if z == Anywhere && zone != "" {
			answered = zone
		}
		for t, p := range byType {
			_, exact := s.prices.Spot[zone][t]
			if z == Anywhere && exact {
				continue
			}
			if len(types) == 0 || types[t] {
				out.Items = append(out.Items, spotItem{answered, t, "Linux/UNIX", strconv.FormatFloat(p, 'f', 6, 64), now})
			}
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml")
	_ = xml.NewEncoder(w).Encode(out)
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
