/* SPDX-License-Identifier: MIT */
/* tw-report: see torchwrapper/report.h, or run tw-report --help. */
#include "config.h"

#include <stdio.h>

#include "torchwrapper/report.h"

int main(int argc, char **argv)
{
    return tw_report_main(argc, argv, stdout, stderr);
}
