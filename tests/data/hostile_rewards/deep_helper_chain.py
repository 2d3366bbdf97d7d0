# attack: a chain of 200 helpers: crashed the recursive checker, and its depth limit differed between callers
# class: checker
# expect: call-depth
# stage: static
# train: yes


def step0(state):
    return step1(state) * 1.0

def step1(state):
    return step2(state) * 1.0

def step2(state):
    return step3(state) * 1.0

def step3(state):
    return step4(state) * 1.0

def step4(state):
    return step5(state) * 1.0

def step5(state):
    return step6(state) * 1.0

def step6(state):
    return step7(state) * 1.0

def step7(state):
    return step8(state) * 1.0

def step8(state):
    return step9(state) * 1.0

def step9(state):
    return step10(state) * 1.0

def step10(state):
    return step11(state) * 1.0

def step11(state):
    return step12(state) * 1.0

def step12(state):
    return step13(state) * 1.0

def step13(state):
    return step14(state) * 1.0

def step14(state):
    return step15(state) * 1.0

def step15(state):
    return step16(state) * 1.0

def step16(state):
    return step17(state) * 1.0

def step17(state):
    return step18(state) * 1.0

def step18(state):
    return step19(state) * 1.0

def step19(state):
    return step20(state) * 1.0

def step20(state):
    return step21(state) * 1.0

def step21(state):
    return step22(state) * 1.0

def step22(state):
    return step23(state) * 1.0

def step23(state):
    return step24(state) * 1.0

def step24(state):
    return step25(state) * 1.0

def step25(state):
    return step26(state) * 1.0

def step26(state):
    return step27(state) * 1.0

def step27(state):
    return step28(state) * 1.0

def step28(state):
    return step29(state) * 1.0

def step29(state):
    return step30(state) * 1.0

def step30(state):
    return step31(state) * 1.0

def step31(state):
    return step32(state) * 1.0

def step32(state):
    return step33(state) * 1.0

def step33(state):
    return step34(state) * 1.0

def step34(state):
    return step35(state) * 1.0

def step35(state):
    return step36(state) * 1.0

def step36(state):
    return step37(state) * 1.0

def step37(state):
    return step38(state) * 1.0

def step38(state):
    return step39(state) * 1.0

def step39(state):
    return step40(state) * 1.0

def step40(state):
    return step41(state) * 1.0

def step41(state):
    return step42(state) * 1.0

def step42(state):
    return step43(state) * 1.0

def step43(state):
    return step44(state) * 1.0

def step44(state):
    return step45(state) * 1.0

def step45(state):
    return step46(state) * 1.0

def step46(state):
    return step47(state) * 1.0

def step47(state):
    return step48(state) * 1.0

def step48(state):
    return step49(state) * 1.0

def step49(state):
    return step50(state) * 1.0

def step50(state):
    return step51(state) * 1.0

def step51(state):
    return step52(state) * 1.0

def step52(state):
    return step53(state) * 1.0

def step53(state):
    return step54(state) * 1.0

def step54(state):
    return step55(state) * 1.0

def step55(state):
    return step56(state) * 1.0

def step56(state):
    return step57(state) * 1.0

def step57(state):
    return step58(state) * 1.0

def step58(state):
    return step59(state) * 1.0

def step59(state):
    return step60(state) * 1.0

def step60(state):
    return step61(state) * 1.0

def step61(state):
    return step62(state) * 1.0

def step62(state):
    return step63(state) * 1.0

def step63(state):
    return step64(state) * 1.0

def step64(state):
    return step65(state) * 1.0

def step65(state):
    return step66(state) * 1.0

def step66(state):
    return step67(state) * 1.0

def step67(state):
    return step68(state) * 1.0

def step68(state):
    return step69(state) * 1.0

def step69(state):
    return step70(state) * 1.0

def step70(state):
    return step71(state) * 1.0

def step71(state):
    return step72(state) * 1.0

def step72(state):
    return step73(state) * 1.0

def step73(state):
    return step74(state) * 1.0

def step74(state):
    return step75(state) * 1.0

def step75(state):
    return step76(state) * 1.0

def step76(state):
    return step77(state) * 1.0

def step77(state):
    return step78(state) * 1.0

def step78(state):
    return step79(state) * 1.0

def step79(state):
    return step80(state) * 1.0

def step80(state):
    return step81(state) * 1.0

def step81(state):
    return step82(state) * 1.0

def step82(state):
    return step83(state) * 1.0

def step83(state):
    return step84(state) * 1.0

def step84(state):
    return step85(state) * 1.0

def step85(state):
    return step86(state) * 1.0

def step86(state):
    return step87(state) * 1.0

def step87(state):
    return step88(state) * 1.0

def step88(state):
    return step89(state) * 1.0

def step89(state):
    return step90(state) * 1.0

def step90(state):
    return step91(state) * 1.0

def step91(state):
    return step92(state) * 1.0

def step92(state):
    return step93(state) * 1.0

def step93(state):
    return step94(state) * 1.0

def step94(state):
    return step95(state) * 1.0

def step95(state):
    return step96(state) * 1.0

def step96(state):
    return step97(state) * 1.0

def step97(state):
    return step98(state) * 1.0

def step98(state):
    return step99(state) * 1.0

def step99(state):
    return step100(state) * 1.0

def step100(state):
    return step101(state) * 1.0

def step101(state):
    return step102(state) * 1.0

def step102(state):
    return step103(state) * 1.0

def step103(state):
    return step104(state) * 1.0

def step104(state):
    return step105(state) * 1.0

def step105(state):
    return step106(state) * 1.0

def step106(state):
    return step107(state) * 1.0

def step107(state):
    return step108(state) * 1.0

def step108(state):
    return step109(state) * 1.0

def step109(state):
    return step110(state) * 1.0

def step110(state):
    return step111(state) * 1.0

def step111(state):
    return step112(state) * 1.0

def step112(state):
    return step113(state) * 1.0

def step113(state):
    return step114(state) * 1.0

def step114(state):
    return step115(state) * 1.0

def step115(state):
    return step116(state) * 1.0

def step116(state):
    return step117(state) * 1.0

def step117(state):
    return step118(state) * 1.0

def step118(state):
    return step119(state) * 1.0

def step119(state):
    return step120(state) * 1.0

def step120(state):
    return step121(state) * 1.0

def step121(state):
    return step122(state) * 1.0

def step122(state):
    return step123(state) * 1.0

def step123(state):
    return step124(state) * 1.0

def step124(state):
    return step125(state) * 1.0

def step125(state):
    return step126(state) * 1.0

def step126(state):
    return step127(state) * 1.0

def step127(state):
    return step128(state) * 1.0

def step128(state):
    return step129(state) * 1.0

def step129(state):
    return step130(state) * 1.0

def step130(state):
    return step131(state) * 1.0

def step131(state):
    return step132(state) * 1.0

def step132(state):
    return step133(state) * 1.0

def step133(state):
    return step134(state) * 1.0

def step134(state):
    return step135(state) * 1.0

def step135(state):
    return step136(state) * 1.0

def step136(state):
    return step137(state) * 1.0

def step137(state):
    return step138(state) * 1.0

def step138(state):
    return step139(state) * 1.0

def step139(state):
    return step140(state) * 1.0

def step140(state):
    return step141(state) * 1.0

def step141(state):
    return step142(state) * 1.0

def step142(state):
    return step143(state) * 1.0

def step143(state):
    return step144(state) * 1.0

def step144(state):
    return step145(state) * 1.0

def step145(state):
    return step146(state) * 1.0

def step146(state):
    return step147(state) * 1.0

def step147(state):
    return step148(state) * 1.0

def step148(state):
    return step149(state) * 1.0

def step149(state):
    return step150(state) * 1.0

def step150(state):
    return step151(state) * 1.0

def step151(state):
    return step152(state) * 1.0

def step152(state):
    return step153(state) * 1.0

def step153(state):
    return step154(state) * 1.0

def step154(state):
    return step155(state) * 1.0

def step155(state):
    return step156(state) * 1.0

def step156(state):
    return step157(state) * 1.0

def step157(state):
    return step158(state) * 1.0

def step158(state):
    return step159(state) * 1.0

def step159(state):
    return step160(state) * 1.0

def step160(state):
    return step161(state) * 1.0

def step161(state):
    return step162(state) * 1.0

def step162(state):
    return step163(state) * 1.0

def step163(state):
    return step164(state) * 1.0

def step164(state):
    return step165(state) * 1.0

def step165(state):
    return step166(state) * 1.0

def step166(state):
    return step167(state) * 1.0

def step167(state):
    return step168(state) * 1.0

def step168(state):
    return step169(state) * 1.0

def step169(state):
    return step170(state) * 1.0

def step170(state):
    return step171(state) * 1.0

def step171(state):
    return step172(state) * 1.0

def step172(state):
    return step173(state) * 1.0

def step173(state):
    return step174(state) * 1.0

def step174(state):
    return step175(state) * 1.0

def step175(state):  # <- rejected here
    return step176(state) * 1.0

def step176(state):
    return step177(state) * 1.0

def step177(state):
    return step178(state) * 1.0

def step178(state):
    return step179(state) * 1.0

def step179(state):
    return step180(state) * 1.0

def step180(state):
    return step181(state) * 1.0

def step181(state):
    return step182(state) * 1.0

def step182(state):
    return step183(state) * 1.0

def step183(state):
    return step184(state) * 1.0

def step184(state):
    return step185(state) * 1.0

def step185(state):
    return step186(state) * 1.0

def step186(state):
    return step187(state) * 1.0

def step187(state):
    return step188(state) * 1.0

def step188(state):
    return step189(state) * 1.0

def step189(state):
    return step190(state) * 1.0

def step190(state):
    return step191(state) * 1.0

def step191(state):
    return step192(state) * 1.0

def step192(state):
    return step193(state) * 1.0

def step193(state):
    return step194(state) * 1.0

def step194(state):
    return step195(state) * 1.0

def step195(state):
    return step196(state) * 1.0

def step196(state):
    return step197(state) * 1.0

def step197(state):
    return step198(state) * 1.0

def step198(state):
    return step199(state) * 1.0


def step199(state):
    return state.base_height * 0.0 + 1.0


def _reward_deep(state):
    return step0(state)
