//! Messages the tests of the HL7 model share, and a way to look at a
//! segment's parts whole.

use super::parts::SegmentRef;

/// A real-world style admission (ADT^A01) with repetitions, components,
/// subcomponents and escape sequences.
pub const ADT_A01: &str = "MSH|^~\\&|ADT1|GOOD HEALTH HOSPITAL|GHH LAB, INC.|GOOD HEALTH HOSPITAL|198808181126|SECURITY|ADT^A01^ADT_A01|MSG00001|P|2.8||\rEVN|A01|200708181123||\rPID|1||PATID1234^^^GOOD HEALTH HOSPITAL^MR~123456789^^^USSSA^SS||EVERYMAN^ADAM^A^III||19610615|M||2106-3^White^HL70005|2222 HOME STREET^^GREENSBORO^NC^27401-1020|GL|(555) 555-2004|(555)555-2004||S||PATID12345001^2^M10^ADT1^AN^A|444333333|987654^NC|\rNK1|1|NUCLEAR^NELDA^W|SPO^Spouse^HL70063||||NK^NEXT OF KIN\rPV1|1|I|2000^2012^01||||004777^ATTEND^AARON^A|||SUR||||ADM|A0|";

/// A lab result (ORU^R01) with two OBX segments, an escaped `&` and `^`
/// in a comment, and a subcomponent-bearing ordering provider.
pub const ORU_R01: &str = "MSH|^~\\&|GHH LAB|ELAB-3|GHH OE|BLDG4|200202150930||ORU^R01|CNTRL-3456|P|2.4\rPID|||555-44-4444||EVERYWOMAN^EVE^E^^^^L|JONES|19620320|F|||153 FERNWOOD DR.^^STATESVILLE^OH^35292||(206)3345232|(206)752-121||||AC555444444||67-A4335^OH^20030520\rOBR|1|845439^GHH OE|1045813^GHH LAB|15545^GLUCOSE|||200202150730|||||||||555-55-5555&PRIMARY&PATRICIA P^^^^MD^^|||||||||F||||||444-44-4444^HIPPOCRATES^HOWARD H^^^^MD\rOBX|1|SN|1554-5^GLUCOSE^POST 12H CFST:MCNC:PT:SER/PLAS:QN||^182|mg/dl|70_105|H|||F\rOBX|2|TX|NOTE^Comment||Fasting \\T\\ fed \\S\\ see \\.br\\ notes~second line||||||F";

/// A segment's parts, field by field: repetitions, components, subcomponents.
pub fn parts(segment: SegmentRef<'_>) -> Vec<Vec<Vec<Vec<&str>>>> {
    segment
        .fields()
        .map(|f| f.repeats().map(|r| r.components().map(|c| c.subcomponents().collect()).collect()).collect())
        .collect()
}
