// The reference for tests/test_vaultenv_url.py: what Go's own parsers say of each input.
//
// Each line of stdin is one input, hex-encoded (so it may hold any byte, a newline too). The first line
// written is runtime.Version(); then one line per input: "1" when Go accepts it, "0 <Go's error>" when not.
// Mode "url" asks net/url.Parse; mode "ipv6" asks net/netip.ParseAddr, and counts an IPv4 address as refused
// (what url.Parse asks of the inside of a host in brackets since Go 1.24.8 and 1.25.2).
package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"runtime"
)

func verdict(mode string, s string) error {
	switch mode {
	case "url":
		_, err := url.Parse(s)
		return err
	case "ipv6":
		a, err := netip.ParseAddr(s)
		if err == nil && a.Is4() {
			return fmt.Errorf("an IPv4 address")
		}
		return err
	}
	fmt.Fprintln(os.Stderr, "gourl: mode is url or ipv6")
	os.Exit(2)
	return nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gourl url|ipv6 <hex lines")
		os.Exit(2)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	fmt.Fprintln(out, runtime.Version())
	for in.Scan() {
		b, err := hex.DecodeString(in.Text())
		if err != nil {
			fmt.Fprintln(os.Stderr, "gourl:", err)
			os.Exit(2)
		}
		if err := verdict(os.Args[1], string(b)); err != nil {
			fmt.Fprintf(out, "0 %s\n", err)
		} else {
			fmt.Fprintln(out, "1")
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "gourl:", err)
		os.Exit(2)
	}
}
