package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/keyhook/keyhook/subscription"
)

// listKeys prints "keyhook subscriptions keys": the keys not flowing.
func listKeys(ctx context.Context, c *apiClient, cmd, id, state string, limit int, stdout io.Writer) error {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if state != "" {
		q.Set("state", state)
	}
	data, _, err := c.do(ctx, http.MethodGet, "/v1/subscriptions/"+url.PathEscape(id)+"/keys", q, nil, nil)
	if err != nil {
		return fmt.Errorf("keyhook %s: %w", cmd, err)
	}
	if c.output == "json" {
		return printJSON(stdout, data)
	}
	var l subscription.KeyList
	if err := json.Unmarshal(data, &l); err != nil {
		return fmt.Errorf("keyhook %s: %w", cmd, err)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tKEY\tOFFSET\tSTATE\tAGE\tATTEMPTS\tLAST\tBEHIND\tPARKED\tOWNER")
	for _, k := range l.Keys {
		key := strconv.Quote(k.Key)
		if k.KeyBase64 != "" {
			key = "base64:" + k.KeyBase64
		}
		last := "-"
		switch {
		case k.LastError != "":
			last = k.LastError
		case k.LastStatus != 0:
			last = strconv.Itoa(k.LastStatus)
		}
		age := (time.Duration(k.AgeMS) * time.Millisecond).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", k.Topic, k.Partition, key, k.Offset, k.State,
			age, k.Attempts, last, k.Behind, k.Parked, k.Owner)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.Truncated {
		fmt.Fprintln(stdout, "(more keys are not flowing than shown)")
	}
	return nil
}
