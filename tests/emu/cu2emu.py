#!/usr/bin/env python3
"""tests/emu/cu2emu.py IN.cu OUT.cpp — rewrite a CUDA source for the host
emulator (emu_cuda.h): what the C++ compiler cannot parse becomes plain C++.

  kernel<<<grid, block[, smem[, stream]]>>>(args)
      -> emu_launch(dim3(grid), dim3(block), (size_t)(smem), (cudaStream_t)(stream),
                    "kernel", max_threads, kernel, args)
     (max_threads: the kernel's __launch_bounds__, or 0)
  extern __shared__ [__align__(n)] T name[];
      -> T *name = (T *)emu_dyn_smem();

Line numbers are kept (a #line directive and the same number of newlines),
so compiler errors and debuggers point into the .cu. Anything it does not
recognize stops the build with a message rather than being passed through.
"""
import re
import sys


def fail(path, s, pos, msg):
    line = s.count('\n', 0, pos) + 1
    sys.exit('%s:%d: cu2emu: %s' % (path, line, msg))


def match_close(s, i, open_c, close_c):
    """Index just past the bracket closing the one at s[i]."""
    depth = 0
    j = i
    while j < len(s):
        c = s[j]
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return -1


def split_top(s):
    """Split on commas outside (), [], {}."""
    parts, depth, cur = [], 0, ''
    for c in s:
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        if c == ',' and depth == 0:
            parts.append(cur.strip())
            cur = ''
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


def kernel_name_start(s, end):
    """Start of `name` or `name<targs>` ending at end (exclusive)."""
    j = end
    while j > 0 and s[j - 1].isspace():
        j -= 1
    if s[j - 1] == '>':
        depth = 0
        while j > 0:
            j -= 1
            if s[j] == '>':
                depth += 1
            elif s[j] == '<':
                depth -= 1
                if depth == 0:
                    break
    while j > 0 and (s[j - 1].isalnum() or s[j - 1] in '_:'):
        j -= 1
    return j


def launch_bounds(s):
    """kernel name -> __launch_bounds__ first argument."""
    out = {}
    pat = re.compile(r'__global__\s+void\s+__launch_bounds__\s*\(')
    for m in pat.finditer(s):
        close = match_close(s, m.end() - 1, '(', ')')
        arg = split_top(s[m.end():close - 1])[0]
        name = re.match(r'\s*(\w+)', s[close:]).group(1)
        out[name] = arg
    return out


def rewrite(path, s):
    bounds = launch_bounds(s)
    out = []
    i = 0
    n_launch = 0
    for m in re.finditer(r'<<<', s):
        if m.start() < i:
            continue
        k0 = kernel_name_start(s, m.start())
        name = s[k0:m.start()].strip()
        if not re.match(r'^[A-Za-z_]\w*(<.*>)?$', name, re.S):
            fail(path, s, m.start(), 'cannot find the kernel name before <<<')
        c1 = s.find('>>>', m.end())
        if c1 < 0:
            fail(path, s, m.start(), 'no >>>')
        cfg = split_top(s[m.end():c1])
        if not 2 <= len(cfg) <= 4:
            fail(path, s, m.start(), 'launch configuration with %d parts' % len(cfg))
        cfg += ['0'] * (4 - len(cfg))
        p = c1 + 3
        while s[p].isspace():
            p += 1
        if s[p] != '(':
            fail(path, s, p, 'no argument list after >>>')
        a1 = match_close(s, p, '(', ')')
        args = s[p + 1:a1 - 1].strip()
        base = re.match(r'\w+', name).group(0)
        mt = bounds.get(base, '0')
        # each argument converted to its parameter's type here, at the call
        # site (NULL and literals convert as in a direct call)
        conv = ''.join(', static_cast<emu_param_t<decltype(&%s), %d>>(%s)' % (name, i, x)
                       for i, x in enumerate(split_top(args)))
        text = 'emu_launch(dim3(%s), dim3(%s), (size_t)(%s), (cudaStream_t)(%s), "%s", (int)(%s), %s%s)' % (
            cfg[0], cfg[1], cfg[2], cfg[3], base, mt, name, conv)
        old = s[k0:a1]
        text += '\n' * old.count('\n')
        out.append(s[i:k0])
        out.append(text)
        i = a1
        n_launch += 1
    out.append(s[i:])
    s = ''.join(out)

    dyn = re.compile(r'extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([\w:]+(?:\s*\*)?)\s*'
                     r'(?:__align__\s*\(\s*\d+\s*\)\s*)?(\w+)\s*\[\s*\]\s*;')
    s = dyn.sub(lambda m: '%s *%s = (%s *)emu_dyn_smem();' % (m.group(1), m.group(2), m.group(1)), s)
    if re.search(r'extern\s+__shared__', s):
        fail(path, s, re.search(r'extern\s+__shared__', s).start(),
             'unrecognized dynamic shared memory declaration')
    if re.search(r'\basm\s*(volatile\s*)?\(', s):
        fail(path, s, re.search(r'\basm\s*(volatile\s*)?\(', s).start(),
             'inline PTX cannot be emulated')
    return s


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: cu2emu.py IN.cu OUT.cpp')
    src = sys.argv[1]
    with open(src) as f:
        s = f.read()
    s = rewrite(src, s)
    with open(sys.argv[2], 'w') as f:
        f.write('#line 1 "%s"\n' % src.replace('\\', '/'))
        f.write(s)


if __name__ == '__main__':
    main()
