package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keyhook/keyhook/deliverylog"
)

// deliveriesCmd runs "keyhook subscriptions deliveries ID [DELIVERY_ID]":
// the delivery log's recent deliveries of a subscription (--failed for
// those with a failed attempt), or one delivery's attempts.
func deliveriesCmd(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, cmd string, args []string, stdout io.Writer) error {
	failed := fs.Bool("failed", false, "only deliveries with a failed attempt")
	limit := fs.Int("limit", 20, "the most deliveries shown")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 && len(pos) != 2 {
		return fmt.Errorf("keyhook %s: want a subscription id and, optionally, a delivery id; got %d arguments", cmd, len(pos))
	}
	c, err := cf.client(cmd)
	if err != nil {
		return err
	}
	base := "/v1/subscriptions/" + url.PathEscape(pos[0]) + "/deliveries"
	if len(pos) == 2 {
		data, _, err := c.do(ctx, http.MethodGet, base+"/"+url.PathEscape(pos[1]), nil, nil, nil)
		if err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		if c.output == "json" {
			return printJSON(stdout, data)
		}
		var d deliverylog.Delivery
		if err := json.Unmarshal(data, &d); err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		fmt.Fprintf(stdout, "delivery %s: %s/%d/%d\n", d.DeliveryID, d.Topic, d.Partition, d.Offset)
		tw := newTable(stdout)
		fmt.Fprintln(tw, "ATTEMPT\tTIME\tSTATUS\tLATENCY\tRESULT\tERROR\tHEADERS\tBODY")
		for _, a := range d.Attempts {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Number, a.Time.Format(time.RFC3339Nano), statusText(a.Status),
				latencyText(a.LatencyMS), a.Result, dash(a.Error), headersText(a.Headers), bodyText(a))
		}
		return tw.Flush()
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	if *failed {
		q.Set("status", "failed")
	}
	data, _, err := c.do(ctx, http.MethodGet, base, q, nil, nil)
	if err != nil {
		return fmt.Errorf("keyhook %s: %w", cmd, err)
	}
	if c.output == "json" {
		return printJSON(stdout, data)
	}
	var page deliverylog.Page
	if err := json.Unmarshal(data, &page); err != nil {
		return fmt.Errorf("keyhook %s: %w", cmd, err)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "DELIVERY\tTOPIC\tPARTITION\tOFFSET\tATTEMPTS\tLAST\tSTATUS\tRESULT\tERROR")
	for _, s := range page.Items {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", s.DeliveryID, s.Topic, s.Partition, s.Offset, s.Attempts,
			s.Last.Time.Format(time.RFC3339), statusText(s.Last.Status), s.Last.Result, dash(s.Last.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		fmt.Fprintf(stdout, "(more deliveries are logged than shown; --limit up to %d)\n", 1000)
	}
	return nil
}

func statusText(s int) string {
	if s == 0 {
		return "-"
	}
	return strconv.Itoa(s)
}

func latencyText(ms float64) string {
	return (time.Duration(ms * float64(time.Millisecond))).Round(100 * time.Microsecond).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func headersText(h map[string]string) string {
	if len(h) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range []string{"Content-Type", "Retry-After"} {
		if v, ok := h[k]; ok {
			parts = append(parts, k+": "+v)
		}
	}
	return strings.Join(parts, "; ")
}

// bodyText is the excerpt on one line, quoted, so that a body cannot
// forge table rows or terminal escapes; cut to 80 bytes for the table
// (-o json shows it whole).
func bodyText(a deliverylog.Attempt) string {
	if a.Body == "" {
		return "-"
	}
	b := a.Body
	if len(b) > 80 {
		b = b[:80]
		a.BodyTruncated = true
	}
	s := strconv.Quote(b)
	if a.BodyTruncated {
		s += "…"
	}
	return s
}
