/* SPDX-License-Identifier: MIT */
/* Runs a fuzz harness over every input kept in its corpus (tests/fuzz-corpus/FUZZ_NAME/, or the
 * files and directories given): the regression test of `make check`, without clang or libFuzzer. */
#include "fuzz.h"

#include <dirent.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    uint8_t *data = NULL;
    size_t size = 0, capacity = 0;
    for (;;) {
        if (size == capacity) {
            capacity = capacity ? capacity * 2 : 4096;
            uint8_t *bigger = realloc(data, capacity);
            if (bigger == NULL) {
                free(data);
                fclose(f);
                return 1;
            }
            data = bigger;
        }
        size_t got = fread(data + size, 1, capacity - size, f);
        if (got == 0)
            break;
        size += got;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 0;
}

static int run_path(const char *path, size_t *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        ++*count;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (d == NULL) {
        perror(path);
        return 1;
    }
    int failed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char child[4096];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        failed |= run_path(child, count);
    }
    closedir(d);
    return failed;
}

int main(int argc, char **argv)
{
    size_t count = 0;
    int failed = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            failed |= run_path(argv[i], &count);
    } else {
        const char *top = getenv("top_srcdir");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/tests/fuzz-corpus/%s", top ? top : ".", FUZZ_NAME);
        failed = run_path(dir, &count);
    }
    printf("%s: %zu inputs replayed%s\n", FUZZ_NAME, count, failed ? ", some could not be read" : "");
    return failed || count == 0;
}
