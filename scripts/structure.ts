// The shape of the source tree, in the words of issue 26: files live in rooms (folders), imports
// are arrows, rooms stand on floors. Run: bun scripts/structure.ts [dir]   (dir defaults to src)
//
// Definitions (each chosen so that the figure answers a newcomer's question):
//
// - Room: a folder that holds .ts/.tsx files, named by its path below dir ("oauth", "lib/db");
//   the files directly in dir (the entry points and the wiring) form one room, ".". A room is what
//   a newcomer opens in the file tree, so rooms say how many places there are to learn.
// - Arrow: a room that imports from another room, counted once however many imports it carries
//   (relative `import … from`, `import type`, `export … from`, `import './x'`, `import('./x')`;
//   packages are not arrows). Arrows say how many other places one has to know to read a room.
// - Floors: the rooms stacked so that as few arrows as possible point up: the ground floor (1)
//   imports nothing of the others, and a room stands one floor above the highest room it imports.
//   The stacking is exact (the fewest upward arrows possible, found per group of rooms that reach
//   each other; a group of more than 16 rooms gets a heuristic, and the summary says so); among
//   equally few, the upward arrows chosen are those carrying the fewest imports, then by name.
//   Floors say how deep a reader may have to go from the top.
// - Arrows back up: the arrows that point up in that stacking (no stacking has fewer), each listed
//   with its imports. A newcomer reads a house from the ground up; each of these is a room that
//   needs one above it, which is to say two rooms that can only be understood together.
//   "type only" marks an arrow whose imports are all `import type`.
// - Circles: groups of files that import each other round in a loop (an import cycle), each listed
//   with every loop through it (12 at most). Inside a circle no file can be read, tested or moved
//   alone, and which module is evaluated first depends on who imports the circle first.
// - Lines: physical lines of the .ts/.tsx files (wc -l).
//
// Issue 26 quoted "18 rooms on 13 floors, 70 arrows of which 9 run back up, one circle" for the
// tree at 9c3499e. There these definitions give 16 rooms on 11 floors, 76 arrows of which 8 run
// back up, one circle (the issue's OAuth circle). No variant tried gives all five figures: the
// files alone stack on exactly 13 floors; top-level folders with each file of src/ as its own
// room give 16 rooms, 68 arrows, 7 back up, 11 floors; folders with each file of src/ as its own
// room give 20 rooms, 93 arrows, 8 back up, 12 floors. Folders are kept because they are what a
// newcomer sees, and because grouping a folder's files into subfolders then shows in the figures.
//
// No dependencies; reads files only.

import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'

const root = resolve(process.argv[2] ?? 'src')
const files: string[] = [] // paths relative to root, '/'-separated
const walk = (dir: string): void => {
  for (const name of readdirSync(dir).sort()) {
    if (name === 'node_modules' || name.startsWith('.')) continue
    const path = join(dir, name)
    if (statSync(path).isDirectory()) walk(path)
    else if (/\.tsx?$/.test(name) && !name.endsWith('.d.ts')) files.push(relative(root, path).split('\\').join('/'))
  }
}
walk(root)
const known = new Set(files)

// Comments out, strings and templates kept, so that an import quoted in a comment is no arrow.
const stripComments = (text: string): string => {
  let out = ''
  for (let i = 0; i < text.length; ) {
    const c = text[i]!, next = text[i + 1]
    if (c === '/' && next === '/') { while (i < text.length && text[i] !== '\n') i++; continue }
    if (c === '/' && next === '*') { const end = text.indexOf('*/', i + 2); i = end < 0 ? text.length : end + 2; out += ' '; continue }
    if (c === '"' || c === "'" || c === '`') {
      let j = i + 1
      while (j < text.length && text[j] !== c) { if (text[j] === '\\') j++; j++ }
      out += text.slice(i, j + 1); i = j + 1; continue
    }
    out += c; i++
  }
  return out
}

type Import = { from: string; to: string; typeOnly: boolean }
const imports: Import[] = []
const staticImport = /\b(?:import|export)\s+(type\s+)?(?:[\w*${}\s,]+?\s+from\s*)?(['"])(\.{1,2}\/[^'"\n]+)\2/g
const dynamicImport = /\bimport\s*\(\s*(['"])(\.{1,2}\/[^'"\n]+)\1\s*\)/g
const resolveSpec = (from: string, spec: string): string | null => {
  const base = relative(root, resolve(root, dirname(from), spec)).split('\\').join('/')
  for (const candidate of [base, `${base}.ts`, `${base}.tsx`, `${base}/index.ts`, `${base}/index.tsx`, base.replace(/\.js$/, '.ts')])
    if (known.has(candidate)) return candidate
  return null
}
let lines = 0
const linesOf = new Map<string, number>()
for (const file of files) {
  const text = readFileSync(join(root, file), 'utf8')
  const n = text.length === 0 ? 0 : text.split('\n').length - (text.endsWith('\n') ? 1 : 0)
  linesOf.set(file, n); lines += n
  const code = stripComments(text)
  for (const m of code.matchAll(staticImport)) {
    const to = resolveSpec(file, m[3]!)
    if (to) imports.push({ from: file, to, typeOnly: Boolean(m[1]) })
  }
  for (const m of code.matchAll(dynamicImport)) {
    const to = resolveSpec(file, m[2]!)
    if (to) imports.push({ from: file, to, typeOnly: false })
  }
}

// Strongly connected groups (Tarjan), for any graph given as node → successors.
const stronglyConnected = (nodes: string[], next: (n: string) => Iterable<string>): string[][] => {
  let counter = 0
  const index = new Map<string, number>(), low = new Map<string, number>(), onStack = new Set<string>()
  const stack: string[] = [], groups: string[][] = []
  const visit = (v: string): void => {
    index.set(v, counter); low.set(v, counter++); stack.push(v); onStack.add(v)
    for (const w of next(v)) {
      if (!index.has(w)) { visit(w); low.set(v, Math.min(low.get(v)!, low.get(w)!)) }
      else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!))
    }
    if (low.get(v) === index.get(v)) {
      const group: string[] = []
      let w: string
      do { w = stack.pop()!; onStack.delete(w); group.push(w) } while (w !== v)
      groups.push(group.sort())
    }
  }
  for (const n of nodes) if (!index.has(n)) visit(n)
  return groups
}

// Circles: file-level cycles.
const fileNext = new Map<string, Set<string>>(files.map((f) => [f, new Set<string>()]))
for (const i of imports) fileNext.get(i.from)!.add(i.to)
// Every loop through a group (at most 12 listed), each starting at its first file by name.
const loopsOf = (group: string[]): string[][] => {
  const inGroup = new Set(group), loops: string[][] = []
  for (const start of group) {
    const walk = (v: string, path: string[]): void => {
      for (const w of [...fileNext.get(v)!].sort()) {
        if (loops.length >= 12 || !inGroup.has(w) || w < start) continue
        if (w === start) loops.push([...path, start])
        else if (!path.includes(w)) walk(w, [...path, w])
      }
    }
    walk(start, [start])
  }
  return loops.sort((a, b) => b.length - a.length)
}
const circles = stronglyConnected(files, (f) => fileNext.get(f)!)
  .filter((g) => g.length > 1 || fileNext.get(g[0]!)!.has(g[0]!))
  .map((g) => ({ files: g, loops: loopsOf(g) }))

// Rooms and arrows.
const roomOf = (file: string): string => (file.includes('/') ? file.slice(0, file.lastIndexOf('/')) : '.')
const rooms = [...new Set(files.map(roomOf))].sort()
type Arrow = { from: string; to: string; imports: Import[] }
const arrows = new Map<string, Arrow>()
for (const i of imports) {
  const from = roomOf(i.from), to = roomOf(i.to)
  if (from === to) continue
  const key = `${from}\u0000${to}`
  if (!arrows.has(key)) arrows.set(key, { from, to, imports: [] })
  arrows.get(key)!.imports.push(i)
}
const roomNext = new Map<string, Arrow[]>(rooms.map((r) => [r, []]))
for (const a of arrows.values()) roomNext.get(a.from)!.push(a)

// The stacking: within each group of rooms that reach each other, an order from the ground up with
// the fewest arrows pointing up (then the fewest imports on them), by dynamic programming over
// subsets; a group of more than 16 rooms falls back to placing, one at a time, the room that adds
// the least (and says so).
const backUp: Arrow[] = []
let approximate = false
for (const group of stronglyConnected(rooms, (r) => roomNext.get(r)!.map((a) => a.to))) {
  if (group.length === 1) continue
  const n = group.length, at = new Map(group.map((r, k) => [r, k]))
  const inner = [...arrows.values()].filter((a) => at.has(a.from) && at.has(a.to))
  // cost of placing room v above the set below: every arrow from a room below into v points up
  const incoming = group.map((_, v) => inner.filter((a) => at.get(a.to) === v).map((a) => ({ bit: 1 << at.get(a.from)!, weight: 1_000_000 + a.imports.length })))
  const costInto = (v: number, below: number): number => incoming[v]!.reduce((sum, a) => (below & a.bit ? sum + a.weight : sum), 0)
  let order: number[] = []
  if (n <= 16) {
    const size = 1 << n
    const best = new Float64Array(size).fill(Infinity), last = new Int8Array(size).fill(-1)
    best[0] = 0
    for (let set = 0; set < size; set++) {
      if (best[set] === Infinity) continue
      for (let v = 0; v < n; v++) {
        if (set & (1 << v)) continue
        const cost = best[set]! + costInto(v, set), grown = set | (1 << v)
        if (cost < best[grown]!) { best[grown] = cost; last[grown] = v }
      }
    }
    for (let set = size - 1; set; set &= ~(1 << last[set]!)) order.unshift(last[set]!)
  } else {
    // Eades, Lin and Smyth's rule: next on the ground, the room whose imports into the rooms still
    // to place weigh least against the imports those rooms make of it.
    approximate = true
    const left = new Set(group.keys())
    const weigh = (a: Arrow) => 1_000_000 + a.imports.length
    while (left.size) {
      let pick = -1, pickCost = Infinity
      for (const v of left) {
        let cost = 0
        for (const a of inner) {
          const from = at.get(a.from)!, to = at.get(a.to)!
          if (from === v && to !== v && left.has(to)) cost += weigh(a)
          else if (to === v && from !== v && left.has(from)) cost -= weigh(a)
        }
        if (cost < pickCost) { pick = v; pickCost = cost }
      }
      order.push(pick); left.delete(pick)
    }
  }
  const height = new Map(order.map((v, k) => [group[v]!, k]))
  for (const a of inner) if (height.get(a.from)! < height.get(a.to)!) backUp.push(a)
}
const isBackUp = new Set(backUp)
const floorOf = new Map<string, number>()
const floor = (room: string): number => {
  if (floorOf.has(room)) return floorOf.get(room)!
  let f = 1
  for (const a of roomNext.get(room)!) if (!isBackUp.has(a)) f = Math.max(f, floor(a.to) + 1)
  floorOf.set(room, f)
  return f
}
for (const r of rooms) floor(r)
const floors = Math.max(0, ...floorOf.values())

// Report.
const plural = (n: number, one: string, many = `${one}s`) => `${n.toLocaleString('en')} ${n === 1 ? one : many}`
console.log(`${relative(process.cwd(), root) || '.'}: ${plural(files.length, 'file')}, ${plural(lines, 'line')}`)
console.log(`${plural(rooms.length, 'room')} on ${plural(floors, 'floor')}, ${plural(arrows.size, 'arrow')} of which ${backUp.length} run${backUp.length === 1 ? 's' : ''} back up, ${plural(circles.length, 'circle')}${approximate ? ' (stacking approximate: a group of more than 16 rooms)' : ''}`)
console.log('\nfloors, top first (room: files, lines; arrows out)')
for (let f = floors; f >= 1; f--) {
  const here = rooms.filter((r) => floorOf.get(r) === f)
  console.log(`  ${f}: ${here.map((r) => {
    const mine = files.filter((x) => roomOf(x) === r)
    const ls = mine.reduce((s, x) => s + linesOf.get(x)!, 0)
    return `${r} (${mine.length}, ${ls}; ${roomNext.get(r)!.length})`
  }).join('  ')}`)
}
console.log(`\narrows back up (${backUp.length})`)
for (const a of backUp.sort((x, y) => x.from.localeCompare(y.from) || x.to.localeCompare(y.to))) {
  const typeOnly = a.imports.every((i) => i.typeOnly)
  console.log(`  ${a.from} (floor ${floorOf.get(a.from)}) → ${a.to} (floor ${floorOf.get(a.to)})${typeOnly ? ', type only' : ''}`)
  const pairs = [...new Set(a.imports.map((i) => `${i.from} → ${i.to}${i.typeOnly ? ' (type)' : ''}`))].sort()
  for (const p of pairs) console.log(`      ${p}`)
}
console.log(`\ncircles (${circles.length})`)
for (const c of circles) {
  console.log(`  ${plural(c.files.length, 'file')}: ${c.files.join(', ')}`)
  for (const loop of c.loops) console.log(`      ${loop.join(' → ')}`)
}
