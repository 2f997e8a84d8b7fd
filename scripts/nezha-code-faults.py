#!/usr/bin/env python3
# Development data for code faults (#38): Nezha's development day has none, and
# its Online Boutique days' logs are absent from the mirror. Made on TraStrainer's
# continuous Train-Ticket day (2023-01-30), after its labelled faults: every 10
# minutes from 14:30 a pod's busiest entry operation throws for 3 minutes (an ERROR
# line on ~90% of its spans there, on the caller's span half the time; the request
# still answers); log files for 14:14-17:59 carry these and background errors at each
# service's rate in Nezha's real log minutes. Synthetic faults on real traces: for
# developing, never for a headline figure.
#
#   scripts/nezha-code-faults.py TRASTRAINER_TRACE_DIR NEZHA_2023-01-30_LOG_DIR OUT
#   threadline bench rca-public --format nezha --path OUT --only exception
import csv, glob, json, os, random, sys, collections, datetime
random.seed(7)
TR, RL, DST = sys.argv[1:4]
os.makedirs(f'{DST}/log', exist_ok=True)
if not os.path.exists(f'{DST}/trace'):
    os.symlink(os.path.abspath(TR), f'{DST}/trace')
LABELS = os.path.join(os.path.dirname(os.path.abspath(TR)), 'label.json')
svc=lambda pod:'-'.join(pod.split('-')[:-2])
# background: share of spans per service with an ERROR line, real log minutes
err=collections.Counter(); seen=collections.Counter(); errspans=set()
for f in glob.glob(f'{RL}/*.csv'):
    for r in csv.reader(open(f)):
        if len(r)>7 and ' ERROR ' in r[7]: errspans.add((r[5],r[6]))
real_minutes=[os.path.basename(f)[:5] for f in glob.glob(f'{RL}/*.csv')]
for m in real_minutes:
    h,mm=map(int,m.split('_')); t=datetime.datetime(2023,1,30,h,mm)-datetime.timedelta(minutes=1)
    f=f"{TR}/{t.strftime('%H_%M')}_trace.csv"
    if not os.path.exists(f): continue
    for r in csv.DictReader(open(f)):
        seen[svc(r['PodName'])]+=1
        if (r['TraceID'],r['SpanID']) in errspans: err[svc(r['PodName'])]+=1
base={s:err[s]/seen[s] for s in seen}
print('background', {s:round(v,4) for s,v in base.items() if v>0})
def rows_of(minute):
    f=f"{TR}/{minute.strftime('%H_%M')}_trace.csv"
    return list(csv.DictReader(open(f))) if os.path.exists(f) else []
start=datetime.datetime(2023,1,30,14,14); end=datetime.datetime(2023,1,30,18,0)
faults=[datetime.datetime(2023,1,30,14,30,17)+datetime.timedelta(minutes=10*k) for k in range(20)]
def line(sp,text,dt):
    ns=int(sp['StartTimeUnixNano'])+dt
    ts=datetime.datetime.fromtimestamp(ns/1e9, datetime.UTC)
    hh=(ts+datetime.timedelta(hours=8)).strftime('%H:%M:%S.%f')[:-3]
    iso=ts.strftime('%Y-%m-%dT%H:%M:%S.%fZ')
    log=json.dumps({"log":f"{hh} ERROR {text.format(t=sp['TraceID'],s=sp['SpanID'])}\n","stream":"stdout","time":iso})
    return [iso,ns,'33.33.33.1',sp['PodName'],'server',sp['TraceID'],sp['SpanID'],log]
# pods with entry spans (called from another pod), by traffic in the window
allrows={}
m=start
while m<end:
    allrows[m]=rows_of(m); m+=datetime.timedelta(minutes=1)
index={(r['TraceID'],r['SpanID']):r for rs in allrows.values() for r in rs}
entry=collections.defaultdict(list)
for r in index.values():
    p=index.get((r['TraceID'],r['ParentID']))
    if p and p['PodName']!=r['PodName']: entry[r['PodName']].append((r,p))
pods=[p for p,v in sorted(entry.items(), key=lambda kv:-len(kv[1])) if 'gateway' not in p and len(v)>300][:20]
random.shuffle(pods)
out_rows=collections.defaultdict(list); labels=[]
for k,at in enumerate(faults):
    lo=int(at.replace(tzinfo=datetime.UTC).timestamp()*1e9); hi=lo+180*10**9
    for j in range(len(pods)):
        pod=pods[(k+j)%len(pods)]
        hits=[(r,p) for r,p in entry[pod] if lo<=int(r['StartTimeUnixNano'])<hi]
        if len(hits)>=5: break
    else:
        print(at, 'no traffic'); continue
    op=collections.Counter(r['OperationName'] for r,_ in hits).most_common(1)[0][0]
    n=0
    for r,p in hits:
        if r['OperationName']!=op or random.random()>0.9: continue
        n+=1
        out_rows[r['TraceID'],r['SpanID']].append(line(r,"o.a.c.c.C.[.[.[.[dispatcherServlet]#175 TraceID: {t} SpanID: {s} Servlet.service() threw exception [java.lang.RuntimeException: chaosblade-mock-exception] with root cause",1_000_000))
        if random.random()<0.5:
            out_rows[p['TraceID'],p['SpanID']].append(line(p,"c.s.RestTemplateClient#88 TraceID: {t} SpanID: {s} HttpServerErrorException: 500 Internal Server Error",2_000_000))
    labels.append({"inject_time":at.strftime('%Y-%m-%d %H:%M:%S'),"inject_timestamp":str(int(at.replace(tzinfo=datetime.UTC).timestamp())),"inject_pod":pod,"inject_type":"exception"})
    print(at.strftime('%H:%M'), pod, op, n, len(hits))
for (t,s),r in index.items():
    if random.random()<base.get(svc(r['PodName']),0):
        out_rows[t,s].append(line(r,"c.s.ServiceImpl#1 TraceID: {t} SpanID: {s} [query][failed]",500_000))
files=collections.defaultdict(list)
for rs in out_rows.values():
    for r in rs:
        ts=datetime.datetime.fromtimestamp(r[1]/1e9, datetime.UTC)+datetime.timedelta(minutes=1)
        files[ts.strftime('%H_%M_log.csv')].append(r)
m=start
while m<end:
    name=(m+datetime.timedelta(minutes=1)).strftime('%H_%M_log.csv')
    w=csv.writer(open(f'{DST}/log/{name}','w',newline=''))
    w.writerow(['Timestamp','TimeUnixNano','Node','PodName','Container','TraceID','SpanID','Log']); w.writerows(files.get(name,[]))
    m+=datetime.timedelta(minutes=1)
real=json.load(open(LABELS))
for l in labels: real.setdefault(l['inject_time'][11:13],[]).append(l)
json.dump(real,open(f'{DST}/2023-01-30-fault_list.json','w'),indent=1)
