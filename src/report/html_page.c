/* SPDX-License-Identifier: MIT */
/*
 * The frame of tw-report's HTML pages (html_page.h): the head with its styles, the end with its scripts
 * (sortable tables, the flame graph's search box), and text escaped for HTML; used by --html's page
 * (html.c) and --diff's (diff_html.c).
 */
#include "config.h"
#include "html_page.h"

#include <stdio.h>
#include <string.h>

void report_html_text(FILE *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        switch (s[i]) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default: fputc(s[i], out);
        }
    }
}

/* A dotted or slashed name in a table's first column (an API, a module path, a site): escaped, with a
 * line-break opportunity after each '.', '/' and ':', so that a long name wraps between its parts
 * (BertModel.<wbr>forward), not inside one ("forwar" / "d"); <wbr> adds no text: sorting and
 * copying see the name as it is. */
void report_html_name(FILE *out, const char *s, size_t len)
{
    size_t from = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '.' || s[i] == '/' || s[i] == ':') {
            report_html_text(out, s + from, i + 1 - from);
            if (i + 1 < len && s[i + 1] != ':')
                fputs("<wbr>", out);
            from = i + 1;
        }
    }
    report_html_text(out, s + from, len - from);
}

static const char page_style[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d1d1f;"
    "background:#f5f6f8}\n"
    "header{background:#23395d;color:#fff;padding:14px 28px}header h1{margin:0;font-size:20px}\n"
    "header p{margin:2px 0 0;opacity:.8}\n"
    "main{padding:8px 28px 40px;max-width:1400px}\n"
    "section{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:12px 18px;margin:16px 0}\n"
    "h2{font-size:16px;margin:4px 0 10px}\n"
    ".cards{display:flex;flex-wrap:wrap;gap:10px}\n"
    ".card{border:1px solid #e3e6ea;border-radius:6px;padding:6px 12px;min-width:120px}\n"
    ".card b{display:block;font-size:17px}.card span{color:#5f6670;font-size:12px}\n"
    "table{border-collapse:collapse;width:100%;font-size:13px}\n"
    "th,td{padding:3px 8px;border-bottom:1px solid #eef0f2;text-align:right;white-space:nowrap}\n"
    "th:first-child,td:first-child{text-align:left;white-space:normal;overflow-wrap:anywhere;min-width:16em}\n"
    "th{background:#f0f2f5;position:sticky;top:0}\n"
    "table.sortable th{cursor:pointer;user-select:none}\n"
    "th[data-dir=desc]::after{content:' \\25BC'}th[data-dir=asc]::after{content:' \\25B2'}\n"
    "tr:hover td{background:#f7f9fc}\n"
    ".scroll{max-height:520px;overflow:auto}\n"
    "tr.slowest td{background:#fde2e1;font-weight:600}\n"
    ".bar{background:#c9d7ee;height:10px;border-radius:2px}\n"
    "tr.slowest .bar{background:#d9534f}\n"
    "tr.regression td{background:#fde2e1}tr.improvement td{background:#e0f3e3}\n"
    "tr.appeared td,tr.vanished td{color:#6b7280;font-style:italic}\n"
    ".note{color:#5f6670;font-size:12px}\n"
    ".finding{border-left:4px solid #9aa0a6;padding:2px 10px;margin:8px 0}.finding p{margin:3px 0}"
    ".finding.high{border-color:#d93025}.finding.medium{border-color:#f29900}\n"
    ".stepbar{display:flex;width:100%;height:28px;border-radius:4px;overflow:hidden;font-size:12px}"
    ".stepbar .part{display:flex;align-items:center;justify-content:center;color:#fff;white-space:nowrap;"
    "overflow:hidden;min-width:2px}.p0{background:#8e44ad}.p1{background:#1a73e8}.p2{background:#e8710a}"
    ".p3{background:#188038}.p4{background:#12b5cb}.p5{background:#80868b}.p6{background:#d93025}"
    ".legend span{margin-right:14px;white-space:nowrap}.legend i{display:inline-block;width:10px;height:10px;"
    "margin-right:4px;border-radius:2px}\n"
    "input[type=search]{font:inherit;padding:3px 8px;width:280px;margin:0 0 6px}\n";

/* Sortable tables: a click on a header sorts by its column (numbers where the header says num). */
static const char page_script[] =
    "document.querySelectorAll('table.sortable').forEach(function(t){\n"
    "var heads=t.tHead.rows[0].cells;\n"
    "[].forEach.call(heads,function(th,i){th.addEventListener('click',function(){\n"
    "var desc=th.getAttribute('data-dir')!=='desc',num=th.classList.contains('num'),body=t.tBodies[0];\n"
    "[].forEach.call(heads,function(h){h.removeAttribute('data-dir');});\n"
    "th.setAttribute('data-dir',desc?'desc':'asc');\n"
    "var rows=[].slice.call(body.rows);rows.sort(function(a,b){var x=a.cells[i].textContent,y=b.cells[i].textContent;\n"
    "var c=num?parseFloat(x)-parseFloat(y):x.localeCompare(y);return desc?-c:c;});\n"
    "rows.forEach(function(r){body.appendChild(r);});});});});\n"
    "var box=document.getElementById('tw-flame-search'),graph=document.getElementById('tw-flame');\n"
    "if(box&&graph)box.addEventListener('input',function(){graph.twFlame.search(box.value);});\n";

void report_html_begin(FILE *out, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          /* Nothing from the network, even by mistake. */
          "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
          "script-src 'unsafe-inline'; img-src data:\">\n<title>",
          out);
    report_html_text(out, title, strlen(title));
    fputs("</title>\n<style>\n", out);
    fputs(page_style, out);
    fputs("</style>\n</head>\n<body>\n", out);
}

void report_html_end(FILE *out)
{
    fputs("<script>\n", out);
    fputs(page_script, out);
    fputs("</script>\n</body>\n</html>\n", out);
}
