#!/usr/bin/env python3
"""Checks the DOM of a `grpo stats --report` page as headless Chromium rendered it (--dump-dom):
the sections are there, every chart has marks inside its frame (or says "no data" where the test
expects it), no axis has repeated or exponent tick labels (a degenerate range), and the bars and
tables have a row per prompt. Used by report_chromium_test.sh.

Usage: report_dom_check.py DOM.html --charts N --hists N --bars N --nodata N --prompts N
                           [--kl]"""
import argparse
import re
import sys
from html.parser import HTMLParser


class Dom(HTMLParser):
    """A flat record of the elements the checks need, in document order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []  # open tags
        self.figures = []  # [{"svg": class or None, "marks": [(x, y)], "ticks": [[text]]...}]
        self.svgs = []  # classes of every svg
        self.nodata = 0
        self.h2 = []
        self.examples = 0
        self.bars = 0
        self.text_of = None
        self.in_fig = None
        self.in_tick = False
        self.tick_axis = None
        self.rows_after = {}  # h2 text -> table rows until the next h2
        self.cur_h2 = None
        self.viewbox = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        if tag == "figure":
            self.in_fig = {"svg": None, "marks": [], "ticks": {}, "nodata": False}
            self.figures.append(self.in_fig)
        elif tag == "svg":
            self.svgs.append(cls)
            if self.in_fig is not None:
                self.in_fig["svg"] = cls
                vb = a.get("viewbox") or a.get("viewBox") or "0 0 0 0"
                self.viewbox = [float(v) for v in vb.split()]
        elif tag == "circle" and cls == "pt" and self.in_fig is not None:
            self.in_fig["marks"].append((float(a["cx"]), float(a["cy"])))
        elif tag == "rect" and cls == "hbar" and self.in_fig is not None:
            self.in_fig["marks"].append((float(a["x"]), float(a["y"])))
        elif tag == "rect" and cls == "bar":
            self.bars += 1
        elif tag == "text" and cls == "tick" and self.in_fig is not None:
            self.in_tick = True
            # y-axis ticks are right-aligned (text-anchor end), x-axis ones centred
            self.tick_axis = "y" if a.get("text-anchor") == "end" else "x"
            self.in_fig["ticks"].setdefault(self.tick_axis, []).append("")
        elif tag == "p" and "nodata" in cls:
            self.nodata += 1
            if self.in_fig is not None:
                self.in_fig["nodata"] = True
        elif tag == "div" and cls == "ex":
            self.examples += 1
        elif tag == "h2":
            self.text_of = "h2"
            self.h2.append("")
        elif tag == "tr" and self.cur_h2 is not None:
            self.rows_after[self.cur_h2] = self.rows_after.get(self.cur_h2, 0) + 1

    def handle_endtag(self, tag):
        if tag == "figure":
            self.in_fig = None
        elif tag == "text":
            self.in_tick = False
        elif tag == "h2":
            self.text_of = None
            self.cur_h2 = self.h2[-1]

    def handle_data(self, data):
        if self.in_tick:
            self.in_fig["ticks"][self.tick_axis][-1] += data
        if self.text_of == "h2":
            self.h2[-1] += data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dom")
    for k in ("charts", "hists", "bars", "nodata", "prompts"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--kl", action="store_true")
    o = ap.parse_args()
    html = open(o.dom, encoding="utf-8").read()  # raises on invalid UTF-8
    d = Dom()
    d.feed(html)
    errs = []
    if "<h1>grpo run report</h1>" not in html:
        errs.append("the page did not render")
    for cls, want in (("chart", o.charts), ("hist", o.hists)):
        got = d.svgs.count(cls)
        if got != want:
            errs.append("%d %s svgs, expected %d" % (got, cls, want))
    if d.nodata != o.nodata:
        errs.append("%d 'no data' lines, expected %d" % (d.nodata, o.nodata))
    for i, f in enumerate(d.figures):
        if f["nodata"]:
            continue
        if not f["marks"]:
            errs.append("figure %d (%s) has no marks" % (i, f["svg"]))
        for x, y in f["marks"]:
            if not (0 <= x <= d.viewbox[2] and 0 <= y <= d.viewbox[3]):
                errs.append("figure %d: a mark at %g,%g is outside the frame" % (i, x, y))
        for axis, ticks in f["ticks"].items():
            if f["svg"] == "hist" and axis == "x":
                continue  # bin labels
            if len(ticks) < 2 or len(set(ticks)) != len(ticks):
                errs.append("figure %d: degenerate %s axis %s" % (i, axis, ticks))
            for t in ticks:
                if re.search(r"\d[eE][-+]?\d", t):
                    errs.append("figure %d: exponent tick %s" % (i, t))
    need = ["Per prompt: solve rate and pass@k", "Per verifier: pass rate and latency (ms)",
            "Distributions: reward, completion length, finish reasons", "Throughput over time",
            "Per worker", "KL and logprob mismatch to the reference policy",
            "Example completions per verdict", "Per step"]
    for h in need:
        if h not in d.h2:
            errs.append("no section %r" % h)
    rows = d.rows_after.get("Per prompt: solve rate and pass@k", 0)
    if rows != o.prompts + 1:
        errs.append("per-prompt table has %d rows, expected %d" % (rows, o.prompts + 1))
    if d.bars != o.bars:
        errs.append("%d bars, expected %d" % (d.bars, o.bars))
    if d.examples == 0:
        errs.append("no example completion")
    kl_chart = "KL to the reference policy against step" in html
    if kl_chart != o.kl:
        errs.append("KL chart %s, expected %s" % (kl_chart, o.kl))
    if errs:
        print("report_dom_check: %s: FAIL:\n  %s" % (o.dom, "\n  ".join(errs)))
        return 1
    marks = sum(len(f["marks"]) for f in d.figures)
    print("report_dom_check: %s: ok (%d figures, %d marks, %d bars, %d examples)" %
          (o.dom, len(d.figures), marks, d.bars, d.examples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
