#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every cross-reference into dlock's documents resolves.

The documents (README.md and docs/*.md) link to each other and to
sections ("redis.md#the-wait-queue-one-message-per-handoff"); code
comments and tests cite a document and a section by its heading
("docs/redis.md, \"Redlock\"").  A link or citation whose file or
heading is gone is reported, with where it stands.

usage: check-doc-links.py SOURCE_ROOT
"""
import os
import re
import sys

LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')
# docs/NAME.md, "Heading"  or  docs/NAME.md ("Heading"), in any source file
CITATION = re.compile(r'docs/([\w.-]+\.md),?\s*\(?"([^"]+)"')
SOURCES = ('src', 'tests', 'scripts', 'bench', 'examples')


def markdown_lines(path):
    """The lines of a Markdown file outside fenced code blocks."""
    fenced = False
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if line.startswith('```'):
                fenced = not fenced
                continue
            if not fenced:
                yield number, line.rstrip('\n')


def slug(heading):
    """A heading's anchor as GitHub makes it."""
    text = heading.strip().lower().replace('`', '')
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def headings(path, cache={}):
    """The headings of a Markdown file and their anchors."""
    if path not in cache:
        titles, anchors, seen = set(), set(), {}
        for _, line in markdown_lines(path):
            m = HEADING.match(line)
            if not m:
                continue
            titles.add(m.group(2))
            anchor = slug(m.group(2))
            if anchor in seen:
                seen[anchor] += 1
                anchor = f'{anchor}-{seen[anchor]}'
            else:
                seen[anchor] = 0
            anchors.add(anchor)
        cache[path] = (titles, anchors)
    return cache[path]


def check_links(root, document, problems):
    base = os.path.dirname(document)
    for number, line in markdown_lines(document):
        # Inline code is not a link.
        for target in LINK.findall(re.sub(r'`[^`]*`', '', line)):
            if re.match(r'^[a-z]+:', target):
                continue
            name, _, anchor = target.partition('#')
            path = os.path.normpath(os.path.join(base, name)) if name else document
            where = f'{os.path.relpath(document, root)}:{number}'
            if not os.path.exists(path):
                problems.append(f'{where}: {target}: no such file')
            elif anchor and path.endswith('.md') and anchor not in headings(path)[1]:
                problems.append(f'{where}: {target}: no such heading')


def check_citations(root, problems):
    """Check every citation in the sources; returns how many there are."""
    count = 0
    for top in SOURCES:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                path = os.path.join(folder, name)
                if os.path.samefile(path, __file__):
                    continue
                try:
                    with open(path, encoding='utf-8') as f:
                        text = f.read()
                except (UnicodeDecodeError, OSError):
                    continue
                # A citation may run over a comment's line break.
                joined = re.sub(r'\n\s*(?:\*|--|#)?\s*', ' ', text)
                for document, title in CITATION.findall(joined):
                    count += 1
                    target = os.path.join(root, 'docs', document)
                    where = os.path.relpath(path, root)
                    if not os.path.exists(target):
                        problems.append(f'{where}: docs/{document}: no such document')
                    elif title not in headings(target)[0]:
                        problems.append(f'{where}: docs/{document}, "{title}": no such heading')
    return count


def main(root):
    problems = []
    documents = [os.path.join(root, 'README.md')]
    docs = os.path.join(root, 'docs')
    documents += sorted(os.path.join(docs, n) for n in os.listdir(docs) if n.endswith('.md'))
    for document in documents:
        check_links(root, document, problems)
    citations = check_citations(root, problems)
    for problem in problems:
        print(problem)
    print(f'{len(documents)} documents, {citations} citations in the sources, '
          f'{len(problems)} broken references')
    return 1 if problems else 0


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
